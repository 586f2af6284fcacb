"""Read batches where torch is not installed (make test-wheel runs it in such
an environment): numpy and Arrow batches of a StreamingDataset, a Mixture and
a FollowingDataset come without torch, and what needs torch says to install
the croupier[torch] extra.

usage: python without_torch.py FOLDER
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

import croupier as cr


def main(folder: Path) -> None:
    assert importlib.util.find_spec("torch") is None, "torch is installed here"
    table = cr.create_table(folder / "t", pa.table({"id": np.arange(100), "x": np.ones(100)}))
    ds = cr.StreamingDataset(table, global_batch_size=10, format="numpy")
    ids = sorted(i for batch in ds for i in batch["id"].tolist())
    assert ids == list(range(100)), ids
    state = ds.state_dict()
    arrow = cr.StreamingDataset(table, global_batch_size=10, format="arrow")
    first = next(iter(arrow))
    assert isinstance(first, pa.RecordBatch), first
    assert first.num_rows == 10, first
    arrow.load_state_dict(state)
    other = cr.StreamingDataset(table, global_batch_size=10, format="arrow")
    mix = cr.Mixture([(arrow, 0.5), (other, 0.5)], seed=1)
    steps = list(mix)
    assert steps, "the mixture made no step"
    follow = cr.FollowingDataset(table, cr.Follow(wait_timeout=0.01), global_batch_size=10,
                                 format="numpy")  # fmt: skip
    assert sum(len(batch["id"]) for batch in follow) == 100
    for needs_torch in (
        lambda: cr.StreamingDataset(table, global_batch_size=10),
        lambda: cr.DataLoader,
    ):
        try:
            needs_torch()
        except ModuleNotFoundError as exc:
            message = str(exc)
        else:
            raise AssertionError("torch was not needed")
        assert "pip install 'croupier[torch]'" in message, message
    assert "torch" not in sys.modules
    print("batches without torch: numpy, arrow, Mixture, FollowingDataset")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
