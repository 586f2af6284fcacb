"""croupier demo: train on RL rollouts, checkpoint mid-epoch, resume exactly.

    python examples/demo.py [--data ./demo-data] [--workers 0]

1. writes a small dataset of RL rollouts (token ids, logprobs, reward, text)
   as plain Parquet files, the way any pipeline would (not a croupier table:
   `croupier tables create` or ``cr.rewrite`` makes one of them);
2. opens them with croupier (pinned at open) and trains a tiny model for one epoch, saving a
   checkpoint (a small JSON dict) half-way through;
3. builds a fresh dataset from the checkpoint, as a restarted job would, and
   checks that the resumed steps are exactly the rest of the first run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import nn

import croupier as cr

VOCAB = 1000
FILES, ROWS_PER_FILE = 4, 5000
GLOBAL_BATCH, NUM_SPLITS = 64, 16
COLUMNS = ["output_tokens", "output_logprobs", "reward"]
LOREM = (
    "The croupier shuffles the deck once and deals the same cards to however many "
    "players sit down; every hand is known in advance, so nobody waits and nobody "
    "gets a card twice. "
)


def write_rollouts(folder: Path, seed: int = 0) -> None:
    """Write FILES Parquet files of ROWS_PER_FILE rollouts each into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for f in range(FILES):
        n = ROWS_PER_FILE
        lengths = rng.integers(16, 257, n)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        tokens = rng.integers(1, VOCAB, int(offsets[-1]), dtype=np.int32)  # 0 is padding
        logprobs = -rng.exponential(1.0, int(offsets[-1])).astype(np.float32)
        # The reward the model learns: the share of "good" tokens (ids below 100).
        good = np.add.reduceat((tokens < 100).astype(np.float32), offsets[:-1])
        reward = (good / lengths).astype(np.float32)
        ids = np.arange(f * n, (f + 1) * n, dtype=np.int64)
        table = pa.table(
            {
                "rollout_id": ids,
                "problem_id": ids // 8,
                "output_tokens": pa.ListArray.from_arrays(offsets, tokens),
                "output_logprobs": pa.ListArray.from_arrays(offsets, logprobs),
                "reward": reward,
                "text": [f"rollout {i}: {LOREM[i % 40 :]}{LOREM[: i % 40]}" for i in ids],
            }
        )
        pq.write_table(
            table,
            folder / f"rollouts-{f:03d}.parquet",
            row_group_size=1024,
            write_page_index=True,
        )


class RewardModel(nn.Module):
    """Mean token embedding plus mean logprob -> predicted reward."""

    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(VOCAB, 32, mode="mean", padding_idx=0)
        self.head = nn.Linear(33, 1)

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        lengths = batch["output_tokens_lengths"].clamp(min=1)
        mean_logprob = batch["output_logprobs"].sum(dim=1) / lengths
        features = torch.cat([self.bag(batch["output_tokens"]), mean_logprob[:, None]], dim=1)
        return self.head(features).squeeze(1)


def progress(batches: Iterable[Any], total: int, desc: str) -> Iterator[Any]:
    """A tqdm bar on a terminal, a plain line every 50 steps otherwise."""
    if sys.stderr.isatty():
        from tqdm import tqdm

        yield from tqdm(batches, total=total, desc=desc, unit="step")
        return
    for i, batch in enumerate(batches):
        if i % 50 == 0:
            print(f"{desc}: step {i}/{total}", flush=True)
        yield batch


def fingerprint(batch: dict[str, torch.Tensor]) -> tuple[float, int]:
    """What a step held, to compare runs: (sum of rewards, number of tokens)."""
    return float(batch["reward"].sum()), int(batch["output_tokens_lengths"].sum())


def make_dataset(tbl: cr.Table) -> cr.StreamingDataset:
    return cr.StreamingDataset(
        tbl,
        global_batch_size=GLOBAL_BATCH,
        num_splits=NUM_SPLITS,
        columns=COLUMNS,
        list_format="padded",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("demo-data"), help="where to write")
    parser.add_argument("--workers", type=int, default=0, help="num_workers of cr.DataLoader")
    args = parser.parse_args()

    table_folder = args.data.resolve() / "rollouts"
    write_rollouts(table_folder)
    tbl = cr.open_table("file://" + str(table_folder))
    print(f"table: {tbl.num_rows} rows in {tbl.num_files} files, version {tbl.version[:16]}")

    torch.manual_seed(0)
    model = RewardModel()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    ds = make_dataset(tbl)
    loader = cr.DataLoader(ds, num_workers=args.workers)
    steps, mid = ds.steps_per_epoch, ds.steps_per_epoch // 2
    checkpoint = args.data / "checkpoint.json"
    first_run = []
    start = time.perf_counter()
    for batch in progress(loader, steps, "epoch 0"):
        loss = nn.functional.mse_loss(model(batch), batch["reward"])
        opt.zero_grad()
        loss.backward()
        opt.step()
        first_run.append(fingerprint(batch))
        if len(first_run) == mid:
            checkpoint.write_text(json.dumps(loader.state_dict(), indent=2))
    elapsed = time.perf_counter() - start
    print(
        f"trained {steps} steps, {steps * GLOBAL_BATCH / elapsed:,.0f} samples/s, "
        f"final loss {loss.item():.5f}; checkpoint at step {mid}: {checkpoint}"
    )

    # A restarted job: a fresh table handle and dataset, positioned by the checkpoint.
    state = json.loads(checkpoint.read_text())
    resumed_ds = make_dataset(cr.open_table(tbl.uri))
    resumed_ds.load_state_dict(state)
    resumed = [fingerprint(b) for b in cr.DataLoader(resumed_ds, num_workers=args.workers)]
    ok = resumed == first_run[mid:]
    print(
        f"resume check: {'OK' if ok else 'MISMATCH'}: resumed at step "
        f"{state['steps_consumed']} of epoch {state['epoch']}, {len(resumed)} steps, "
        f"expected the first run's last {steps - mid}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
