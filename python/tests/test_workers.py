"""Real DataLoader worker processes: spawn deals like num_workers=0; fork is refused."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch.utils.data

import croupier as cr

G, S = 16, 8


def ids(loader: object) -> list[list[int]]:
    return [batch["id"].tolist() for batch in loader]  # type: ignore[attr-defined]


def dataset(table_uri: str, **kwargs: object) -> cr.StreamingDataset:
    tbl = cr.open_table(table_uri)
    return cr.StreamingDataset(
        tbl, global_batch_size=G, num_splits=S, columns=["id"], drop_last=False, **kwargs
    )


def test_torch_dataloader_spawn_workers(table_uri: str) -> None:
    expected = ids(dataset(table_uri))
    ds = dataset(table_uri)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=2, multiprocessing_context="spawn"
    )
    assert ids(loader) == expected
    # the dataset went to worker processes it cannot hear from
    with pytest.raises(RuntimeError, match=r"croupier\.DataLoader") as info:
        ds.state_dict()
    assert "StatefulDataLoader" in str(info.value)


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_croupier_dataloader_three_workers(table_uri: str) -> None:
    expected = ids(dataset(table_uri))
    ds = dataset(table_uri)
    loader = cr.DataLoader(ds, num_workers=3)
    assert loader.multiprocessing_context.get_start_method() == "spawn"
    assert ids(loader) == expected
    assert ds.state_dict()["epoch"] == 1
    assert ds.state_dict()["steps_consumed"] == 0


def test_croupier_dataloader_refuses_fork(table_uri: str) -> None:
    with pytest.raises(cr.InvalidArgumentError, match="fork"):
        cr.DataLoader(dataset(table_uri), num_workers=1, multiprocessing_context="fork")
    with pytest.raises(cr.InvalidArgumentError, match="batch_size"):
        cr.DataLoader(dataset(table_uri), batch_size=4)


FORK_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch.utils.data
    import croupier as cr

    ds = cr.StreamingDataset(cr.open_table(sys.argv[1]), global_batch_size=8, format="numpy")
    loader = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=1, multiprocessing_context="fork"
    )
    try:
        next(iter(loader))
    except Exception as exc:
        print(type(exc).__name__, exc)
        sys.exit(3)
    print("no error")
    """
)


def test_fork_after_load_raises_and_never_hangs(table_uri: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT, table_uri],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("ForkError")
    assert "fork" in done.stdout
    assert "spawn" in done.stdout
