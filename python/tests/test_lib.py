"""The ctypes binding: loading, init, handles, pickling datasets in-process."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import croupier as cr
from croupier import _lib, _native


def test_version_and_init() -> None:
    # One version, written in VERSION: the Go library embeds it, the package's
    # metadata reads it.
    written = (Path(__file__).parents[2] / "VERSION").read_text().strip()
    assert cr.version() == cr.__version__ == written
    assert _native._lib().croupier_abi_version() == _native.ABI_VERSION
    cr.init(gomaxprocs=2, memory_limit=1 << 30)
    cr.init()
    with pytest.raises(cr.InvalidArgumentError, match="gomaxprocs"):
        cr.init(gomaxprocs=0)


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("#include <stdint.h>\nint64_t croupier_abi_version(void) { return 999; }\n", "999"),
        ("int croupier_version(void) { return 0; }\n", "none"),
    ],
)
def test_library_of_another_abi_is_refused(tmp_path: Path, source: str, found: str) -> None:
    """A library whose ABI version differs from the package's (or that has none) is
    refused at load with a message saying so, before any of its functions is called."""
    (tmp_path / "lib.c").write_text(source)
    library = tmp_path / "libother.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", library, tmp_path / "lib.c"], check=True)
    run = subprocess.run(
        [sys.executable, "-c", "import croupier; croupier.version()"],
        env={**os.environ, _native.LIBRARY_ENV: str(library)},
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1
    assert f"speaks C ABI version {found}" in run.stderr, run.stderr
    assert f"this croupier package speaks version {_native.ABI_VERSION}" in run.stderr


def test_fork_error_without_calling_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """A different pid than the loading one is refused before any Go call."""
    _native._lib()
    monkeypatch.setattr(_native, "_load_pid", _native._load_pid + 1)
    with pytest.raises(cr.ForkError, match="fork"):
        cr.version()


def test_release_twice_is_harmless(table_uri: str) -> None:
    handle = _lib.table_open(table_uri)
    handle.close()
    handle.close()
    assert handle.closed
    with pytest.raises(cr.ClosedError):
        _ = handle.value


def test_closed_handle_in_go(table_uri: str) -> None:
    handle = _lib.table_open(table_uri)
    raw = handle.value
    handle.close()
    with pytest.raises(cr.ClosedError):
        _lib.table_info(raw)


def test_dataset_pickles_and_reopens(table_uri: str) -> None:
    ds = cr.StreamingDataset(cr.open_table(table_uri), global_batch_size=8, format="numpy")
    copy = pickle.loads(pickle.dumps(ds))
    assert copy._go is None  # reopened lazily
    first = [b["id"].tolist() for b in ds]
    assert [b["id"].tolist() for b in copy] == first
    ds.close()
    with pytest.raises(cr.ClosedError):
        next(iter(ds))


def test_early_break_closes_the_stream(table_uri: str) -> None:
    ds = cr.StreamingDataset(cr.open_table(table_uri), global_batch_size=8, format="numpy")
    for _ in range(20):
        for _batch in ds:
            break
    it = iter(ds)
    next(it)
    it.close()  # generator's finally releases the stream


def test_stream_next_with_a_known_schema(table_uri: str) -> None:
    """Passing the schema of an earlier batch skips exporting it; the batches
    are the same as when each comes with its own."""
    ds = cr.StreamingDataset(cr.open_table(table_uri), global_batch_size=8, format="arrow")
    options = {"epoch": 0, "start_step": 0, "worker": 0, "num_workers": 0}
    runs = []
    for reuse in (False, True):
        stream = _lib.stream_open(ds._handle(), options)
        batches, schema = [], None
        try:
            while (item := _lib.stream_next(stream.value, schema)) is not None:
                batches.append(item)
                if reuse:
                    schema = item[2].schema
        finally:
            stream.close()
        runs.append(batches)
    assert len(runs[0]) == ds.steps_per_epoch > 1
    for (step, steps, batch), (step2, steps2, batch2) in zip(*runs, strict=True):
        assert (step, steps) == (step2, steps2) == (step, 1)
        assert batch.equals(batch2)
        assert batch.schema.equals(batch2.schema, check_metadata=True)
    ds.close()


def test_small_steps_come_coalesced(table_uri: str) -> None:
    """With coalesce_bytes, a batch holds several consecutive steps of the worker;
    split by rank_batch_size they are the steps of a stream without it."""
    ds = cr.StreamingDataset(
        cr.open_table(table_uri), global_batch_size=8, num_splits=2, drop_last=False, format="arrow"
    )
    rows = ds.rank_batch_size

    def steps(coalesce: int) -> tuple[list[tuple[int, list[int]]], int]:
        options = {"start_step": 1, "worker": 0, "num_workers": 2, "coalesce_bytes": coalesce}
        stream = _lib.stream_open(ds._handle(), options)
        out, most = [], 0
        try:
            while (item := _lib.stream_next(stream.value)) is not None:
                first, n, batch = item
                ids = batch.column("id").to_pylist()
                most = max(most, n)
                out += [(first + 2 * i, ids[i * rows : (i + 1) * rows]) for i in range(n)]
        finally:
            stream.close()
        return out, most

    want, one = steps(0)
    got, most = steps(1 << 20)
    assert one == 1
    assert most > 1
    assert got == want
    assert [step for step, _ in want] == list(range(1, ds.steps_per_epoch, 2))
    # 501 rows a stream, 4 a step: the last step, in the last batch, has 1 of each stream
    assert ds.steps_per_epoch == 126
    assert len(want[-1][1]) == 2
    ds.close()
