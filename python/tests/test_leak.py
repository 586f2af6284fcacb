"""Nothing leaks: Arrow memory exported by Go, goroutines and file descriptors come
back to where they were once Python drops or closes tables, permutations,
datasets, streams and batches, however an iteration ends (to its end, ``break``,
an iterator dropped without ``close()``, a ``KeyboardInterrupt``); and closing an
iterator with reads in flight returns promptly."""

from __future__ import annotations

import gc
import os
import random
import signal
import sys
import time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import uri

import croupier as cr
from croupier import _lib, _native


class Usage(NamedTuple):
    """What the Go core holds: Arrow bytes, goroutines, this process's open files."""

    arrow_bytes: int
    goroutines: int
    fds: int


def usage() -> Usage:
    return Usage(_native.allocated_bytes(), _native.goroutines(), _open_files())


def _open_files() -> int:
    """This process's open files, but the lock files and segments of disk cache
    folders (``<folder>/locks``, ``<folder>/<id>.seg``), which a process keeps
    open once it has fetched or read a block there (docs/storage.md, "The disk
    cache")."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # closed meanwhile: the listing's own descriptor
        name = os.path.basename(target.removesuffix(" (deleted)"))
        n += name != "locks" and not name.endswith(".seg")
    return n


def settle(start: Usage) -> Usage:
    """Usage after garbage collection, waiting briefly for Go to let go of ``start``'s excess."""
    deadline = time.monotonic() + 5
    while True:
        gc.collect()
        now = usage()
        if now == start or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


@pytest.fixture
def start(table_uri: str) -> Usage:
    """Usage once the library is loaded and a dataset has been read (warm caches)."""
    with cr.open_table(table_uri) as tbl:
        ds = cr.StreamingDataset(tbl, global_batch_size=32, num_splits=8, format="numpy")
        assert sum(1 for _ in ds) == ds.steps_per_epoch
        ds.close()
    gc.collect()
    return usage()


@pytest.fixture(scope="module")
def perm_uri(table_uri: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A shuffled permutation of the shared table."""
    folder = tmp_path_factory.mktemp("leak") / "perm"
    with cr.open_table(table_uri) as tbl:
        cr.PermutationBuilder(tbl).shuffle(seed=1).persist(uri(folder), progress=False).close()
    return uri(folder)


@pytest.mark.parametrize("format", ["torch", "numpy", "arrow", "python"])
def test_no_leak(table_uri: str, start: Usage, format: str) -> None:
    tbl = cr.open_table(table_uri)
    ds = cr.StreamingDataset(
        tbl, global_batch_size=32, num_splits=8, drop_last=False, format=format
    )
    kept = list(ds)  # batches and tensors sharing Go-allocated buffers
    assert len(kept) == ds.steps_per_epoch
    if format != "python":  # python objects are copies
        assert usage().arrow_bytes > start.arrow_bytes
    del kept
    ds.close()
    tbl.close()
    del ds, tbl
    assert settle(start) == start


def test_leak_check_notices_a_leak(table_uri: str, start: Usage) -> None:
    """The check can fail: a stream left open holds goroutines and read-ahead batches."""
    tbl = cr.open_table(table_uri)
    ds = cr.StreamingDataset(tbl, global_batch_size=32, num_splits=8, format="numpy")
    stream = _lib.stream_open(ds._handle(), {})
    assert _lib.stream_next(stream.value) is not None
    gc.collect()
    leaked = usage()  # the stream is open, reading ahead
    assert leaked.goroutines > start.goroutines
    assert leaked.arrow_bytes > start.arrow_bytes
    stream.close()
    ds.close()
    tbl.close()
    assert settle(start) == start


def test_open_close_cycles(table_uri: str, perm_uri: str, start: Usage) -> None:
    """Tables, permutations, datasets and streams opened and closed 200 times."""
    for i in range(200):
        with cr.open_table(table_uri) as tbl, cr.open_permutations(perm_uri) as perms:
            source = perms["all"] if i % 2 else tbl
            ds = cr.StreamingDataset(source, global_batch_size=32, num_splits=8, columns=["id"],
                                     format="numpy", epoch=i % 3)  # fmt: skip
            batches = iter(ds)
            next(batches)  # the stream is reading ahead
            batches.close()
            ds.close()
    assert settle(start) == start


def consume(batches: Iterable[Any], stop: int) -> Iterator[Any]:
    """Iterate over ``batches``, yielding the first ``stop``, then ``break``."""
    for i, batch in enumerate(batches):
        yield batch
        if i + 1 == stop:
            break


def test_abandoned_iterators(table_uri: str, perm_uri: str, start: Usage) -> None:
    """Iterations dropped mid-read, in every way a training loop can drop them."""
    perms = cr.open_permutations(perm_uri)
    ds = cr.StreamingDataset(perms["all"], global_batch_size=32, num_splits=8, format="numpy")
    loader = cr.DataLoader(ds)
    gc.disable()  # only the collection below may close the iterators left in cycles
    try:
        for i in range(20):
            # break out of the loop (the iterator is dropped and closed by refcount)
            deque(consume(ds, stop=1 + i % 5), maxlen=0)
            deque(consume(loader, stop=1 + i % 4), maxlen=0)
            # dropped without close(), only reachable through a reference cycle
            cycle: dict[str, Any] = {"batches": iter(ds)}
            cycle["self"] = cycle
            next(cycle["batches"])
            del cycle
        held = usage()  # the abandoned streams still hold batches read ahead, or still read
        assert held.arrow_bytes > start.arrow_bytes or held.goroutines > start.goroutines
    finally:
        gc.enable()
    ds.close()
    perms.close()
    assert settle(start) == start


def test_keyboard_interrupt_in_the_loop(table_uri: str, start: Usage) -> None:
    """A KeyboardInterrupt raised at every step of the consuming loop, and at random
    moments inside the loop or the iterator, leaks nothing; the dataset iterates
    again afterwards."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    def train(ds: cr.StreamingDataset, stop: int | None) -> bool:
        """One epoch of training; False if a KeyboardInterrupt stopped it: the
        loop's own at step ``stop``, or the timer's, armed when ``stop`` is None."""
        try:
            if stop is None:
                signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.0005, 0.008))
            try:
                for step, batch in enumerate(ds):
                    batch["id"].sum()  # the training step
                    if step == stop:
                        raise KeyboardInterrupt
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except KeyboardInterrupt:  # also one that lands as the timer is disarmed
            return False
        return True

    rng = random.Random(5)
    tbl = cr.open_table(table_uri)
    ds = cr.StreamingDataset(tbl, global_batch_size=8, num_splits=8, format="torch")
    full = ds.steps_per_epoch
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        for stop in range(full):  # deterministic: at every step of the loop
            assert not train(ds, stop)
            ds.set_epoch(ds.epoch + 1)
        for _ in range(20):  # wherever the timer lands, if it lands
            train(ds, None)
            ds.set_epoch(ds.epoch + 1)
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert len(list(ds)) == full
    ds.close()
    tbl.close()
    assert settle(start) == start


def test_close_with_reads_in_flight_frees_everything(tmp_path: Path, start: Usage) -> None:
    """close() of an iterator while 16 steps are being read and every row group
    is being decoded (a memory budget that keeps rows for a third of the epoch)
    frees them all. That it cancels reads rather than waiting for them is
    loader/TestCloseWithReadsStalled."""
    rows = 200_000
    ids = np.arange(rows, dtype=np.int64)
    text = pa.array([f"row {i} " * 12 for i in range(rows)])
    pq.write_table(pa.table({"id": ids, "text": text}), tmp_path / "part-0.parquet",
                   row_group_size=25_000)  # fmt: skip
    tbl = cr.open_table(uri(tmp_path))
    perm = cr.PermutationBuilder(tbl).shuffle(seed=2).persist(uri(tmp_path / "p"), progress=False)
    ds = cr.StreamingDataset(perm["all"], global_batch_size=4096, num_splits=8, format="arrow",
                             read_ahead=16, memory_budget=64 << 20)  # fmt: skip
    batches = iter(ds)
    next(batches)
    batches.close()
    ds.close()
    perm.close()
    tbl.close()
    assert settle(start) == start


STEPS_TRACED = 3  # steps of each iteration interrupted inside croupier's code


def iterate_until_interrupted(ds: cr.StreamingDataset, n: int | None) -> int:
    """Take STEPS_TRACED batches of ``ds``, raising KeyboardInterrupt at the
    ``n``-th line croupier's own code runs in this thread (none if None); returns
    how many such lines ran."""
    package = str(Path(cr.__file__).parent)
    lines = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal lines
        if event == "line":
            lines += 1
            if lines == n:
                raise KeyboardInterrupt  # raised in the traced line; tracing stops
        return local

    def trace(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename.startswith(package) else None

    sys.settrace(trace)
    try:
        for step, batch in enumerate(ds):
            batch["tokens"].sum()  # the training step
            if step + 1 == STEPS_TRACED:
                break
    finally:
        sys.settrace(None)
    return lines


def test_keyboard_interrupt_inside_the_iterator(
    table_uri: str, start: Usage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A KeyboardInterrupt raised at every line croupier runs while dealing the
    first steps of an iteration (opening the stream, each crossing from Go,
    each conversion, closing it) leaks nothing, and the dataset iterates again.

    One raised while the iterator is finalized, as the loop's ``break`` drops
    it, cannot reach the loop: Python reports it as ignored."""
    ignored: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", ignored.append)
    tbl = cr.open_table(table_uri)
    ds = cr.StreamingDataset(tbl, global_batch_size=8, num_splits=8, format="torch",
                             columns=["id", "tokens"], read_ahead=2)  # fmt: skip
    n = 0
    while True:  # until an iteration ends before its n-th line: each line had its turn
        n += 1
        ds.set_epoch(ds.epoch + 1)
        ignored.clear()
        try:
            ran = iterate_until_interrupted(ds, n)
        except KeyboardInterrupt:
            continue
        if not ignored:
            assert ran < n
            break
        assert [u.exc_type for u in ignored] == [KeyboardInterrupt], n
        assert "generator" in repr(ignored[0].object), n
    assert n > 100
    ds.set_epoch(ds.epoch + 1)
    assert [int(b["id"].sum()) for b in ds] == [int(b["id"].sum()) for b in ds]
    ds.close()
    tbl.close()
    assert settle(start) == start
