"""Arrow memory exported by Go is freed once Python drops every batch and tensor."""

from __future__ import annotations

import gc
import time

import pytest

import croupier as cr
from croupier import _lib


def settle(start: int) -> int:
    """Allocated bytes after garbage collection, waiting briefly for Go to let go."""
    deadline = time.monotonic() + 5
    while True:
        gc.collect()
        now = _lib.allocated_bytes()
        if now == start or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


@pytest.mark.parametrize("format", ["torch", "numpy", "arrow", "python"])
def test_no_leak(table_uri: str, format: str) -> None:
    gc.collect()
    start = _lib.allocated_bytes()
    tbl = cr.open_table(table_uri)
    ds = cr.StreamingDataset(
        tbl, global_batch_size=32, num_splits=8, drop_last=False, format=format
    )
    kept = list(ds)  # batches and tensors sharing Go-allocated buffers
    assert len(kept) == ds.steps_per_epoch
    del kept
    ds.close()
    tbl.close()
    del ds, tbl
    assert settle(start) == start


def test_no_leak_after_early_break(table_uri: str) -> None:
    gc.collect()
    start = _lib.allocated_bytes()
    ds = cr.StreamingDataset(cr.open_table(table_uri), global_batch_size=32, num_splits=8)
    for i, _batch in enumerate(ds):  # the stream is mid-read-ahead when abandoned
        if i == 3:
            break
    del _batch
    ds.close()
    del ds
    assert settle(start) == start
