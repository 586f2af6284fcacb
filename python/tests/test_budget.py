"""The memory bound of a read: peak resident memory over the imports <=
1.25 * memory_budget + 64 MiB (docs/tuning.md, "memory_budget is a bound"),
in one process and over the process tree of a DataLoader with workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import croupier as cr
from croupier.dataset import WORKER_ALLOWANCE

MiB = 2**20

# In a fresh process, as a training script: torch and croupier imported, the
# peak started over from there, then a full shuffle read to the end in this
# process; the peak resident memory (VmHWM) over the imports.
READ_IN_ONE_PROCESS = """
import json, sys
from pathlib import Path
import torch
import croupier as cr

def status(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

Path("/proc/self/clear_refs").write_text("5")
imported = status("VmRSS")
uri, budget = sys.argv[1], int(sys.argv[2])
ds = cr.StreamingDataset(cr.open_table(uri), global_batch_size=64, memory_budget=budget,
                         shuffle_seed=7)
rows = 0
for batch in cr.DataLoader(ds, num_workers=0, in_process=True):
    rows += len(batch["id"])
    del batch
print(json.dumps({"rows": rows, "over": status("VmHWM") - imported, "stats": ds.stats()}))
"""


def read_in_child(script: str, uri: str, budget: int) -> dict[str, Any]:
    """Runs ``script`` in a fresh Python with ``uri`` and ``budget`` as its
    arguments, and returns the JSON object its last line prints."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", script, uri, str(budget)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_wide_rows_in_one_process_within_the_bound(tmp_path: Path) -> None:
    """4,096 rows of lists of 2,000 to 20,000 int32 (180 MB, almost 4 times
    the budget) read in one process with torch batches, bound 124 MiB: the
    library's image, pandas (which pyarrow's to_numpy imports) and a growing
    buffer copied took the peak to 160 to 162 MiB over the imports before,
    100 to 103 since."""
    rows, budget = 4096, 48 * MiB
    uri = wide_rows(tmp_path, rows)
    res = read_in_child(READ_IN_ONE_PROCESS, uri, budget)
    assert res["rows"] == rows
    bound = budget * 5 // 4 + 64 * MiB
    assert res["over"] <= bound, (
        f"peak {res['over'] / MiB:.0f} MiB over the imports, bound {bound / MiB:.0f} MiB; "
        f"stats {res['stats']}"
    )


# In a fresh process, as a training script: the same read through 2 worker
# processes, and the tree's growth as docs/tuning.md defines it: the training
# process's peak over its imports, plus each worker's peak (VmHWM, looked at
# after every batch: a high-water mark, so the last look sees it) over what it
# held when it started, before croupier's library loaded in it (the
# worker_init_fn runs first: GOMAXPROCS in the environment, as many cores as
# the worker would get, leaves croupier nothing to load before it).
READ_WITH_WORKERS = """
import json, os, sys
from pathlib import Path
import torch
import croupier as cr

def status(pid, field):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

def started(_worker):
    Path(os.environ["STARTS"], str(os.getpid())).write_text(str(status("self", "VmRSS")))

if __name__ == "__main__":
    Path("/proc/self/clear_refs").write_text("5")
    imported = status("self", "VmRSS")
    uri, budget, starts = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    os.environ["STARTS"] = str(starts)
    ds = cr.StreamingDataset(cr.open_table(uri), global_batch_size=64, memory_budget=budget,
                             shuffle_seed=7)
    loader = cr.DataLoader(ds, num_workers=2, in_process=False, worker_init_fn=started)
    rows, peaks = 0, {}
    for batch in loader:
        rows += len(batch["id"])
        del batch
        for f in starts.iterdir():
            try:
                peaks[f.name] = status(f.name, "VmHWM") - int(f.read_text())
            except (OSError, TypeError):  # not started, or ended
                pass
    print(json.dumps({"rows": rows, "trainer": status("self", "VmHWM") - imported,
                      "workers": sorted(peaks.values()), "stats": ds.stats()}))
"""


def wide_rows(tmp_path: Path, rows: int) -> str:
    """A table of ``rows`` rows of lists of 2,000 to 20,000 int32; its URI."""
    rng = np.random.default_rng(1)
    lengths = rng.integers(2000, 20001, rows)
    tokens = pa.ListArray.from_arrays(
        pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)),
        pa.array(rng.integers(0, 1 << 20, int(lengths.sum()), dtype=np.int32)),
    )
    uri = f"file://{tmp_path}/wide"
    cr.create_table(uri, pa.table({"id": np.arange(rows), "tokens": tokens}))
    return uri


def test_wide_rows_in_two_workers_within_the_bound_over_the_tree(tmp_path: Path) -> None:
    """1,024 rows of lists of 2,000 to 20,000 int32 (45 MB) read by 2 worker
    processes with 2 * WORKER_ALLOWANCE + 64 MiB, 32 MiB a worker: the
    training process's and both workers' growth together within the bound of
    the whole budget. Divided without the allowance, 32 MiB a worker, the
    tree grew by 211 MiB against a bound of 144 (training process 57, workers 77
    and 77); with it, 32 MiB a worker of 256, by 215 against 384."""
    rows, budget = 1024, 2 * WORKER_ALLOWANCE + 64 * MiB
    uri = wide_rows(tmp_path, rows)
    starts = tmp_path / "starts"
    starts.mkdir()
    cores = len(os.sched_getaffinity(0))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "GOMAXPROCS": str(max(1, cores // 2)),
    }
    script = tmp_path / "read.py"
    script.write_text(READ_WITH_WORKERS)
    out = subprocess.run(
        [sys.executable, str(script), uri, str(budget), str(starts)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["rows"] == rows
    assert len(res["workers"]) == 2
    tree = res["trainer"] + sum(res["workers"])
    bound = budget * 5 // 4 + 64 * MiB
    assert tree <= bound, (
        f"the tree grew by {tree / MiB:.0f} MiB over the imports (training process "
        f"{res['trainer'] / MiB:.0f}, workers {[round(w / MiB) for w in res['workers']]}), "
        f"bound {bound / MiB:.0f} MiB; stats {res['stats']}"
    )


def rare_rows(
    tmp_path: Path,
    rows: int,
    cell: int,
    large: list[int],
    row_group_rows: int | None = None,
    *,
    plain: bool = False,
) -> str:
    """A table of ``rows`` rows of an id and 4 KiB of random bytes, but for
    the rows ``large``, whose cells hold ``cell`` random bytes, in row groups
    of ``row_group_rows`` (None: the default); its URI. ``plain`` writes it
    as plain Parquet with pyarrow instead: no offset index and no
    dictionary, pages of 64 KiB (16 rows of 4 KiB; a large cell ends a page
    of its own and a few small rows)."""
    rng = np.random.default_rng(1)
    sizes = np.array([cell if i in large else 4096 for i in range(rows)], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    data = pa.py_buffer(rng.integers(0, 256, int(offsets[-1]), dtype=np.uint8).tobytes())
    cells = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), rows, [None, pa.py_buffer(offsets.tobytes()), data]
    ).cast(pa.binary())
    tbl = pa.table({"id": np.arange(rows), "cell": cells})
    uri = f"file://{tmp_path}/rare"
    if not plain:
        cr.create_table(uri, tbl, row_group_rows=row_group_rows)
        return uri
    (tmp_path / "rare").mkdir()
    pq.write_table(
        tbl,
        tmp_path / "rare" / "part-0.parquet",
        row_group_size=row_group_rows,
        use_dictionary=False,
        data_page_size=64 << 10,
        write_batch_size=16,
    )
    return uri


class _Held:
    """A converted step, as a collate wraps it: something a weak reference
    can watch."""

    def __init__(self, step: dict[str, object]) -> None:
        self.step = step


def test_a_step_given_out_is_not_held_while_the_next_is_read(tmp_path: Path) -> None:
    """Once the consumer lets go of a step, the dataset holds nothing of it
    while it reads and converts the next: a step that holds a row far larger
    than the rest is as large as that row, and the iterator's own reference
    to it kept it (and its conversion) alive beside the next one."""
    # Steps of a megabyte or more, a batch each (smaller ones come several
    # to a batch).
    uri = rare_rows(tmp_path, 1024, 1 << 20, [100])
    ds = cr.StreamingDataset(cr.open_table(uri), global_batch_size=256, num_splits=1, collate=_Held)
    last: list[weakref.ref[_Held]] = []
    alive: list[bool] = []  # at each batch read, whether the step before was
    convert = ds._convert

    def watched(batch: pa.RecordBatch, sizes: list[int]) -> Iterator[Any]:
        alive.append(bool(last) and last[-1]() is not None)
        return convert(batch, sizes)

    ds._convert = watched  # type: ignore[method-assign]
    steps = 0
    for step in ds:
        last.append(weakref.ref(step))
        del step
        steps += 1
    assert steps == 1024 // 256
    assert alive == [False] * steps, "a step let go of was still held when the next batch was read"


# As READ_IN_ONE_PROCESS, in the table's order, with each batch's figures
# and the read's counters: largest_row, large_page, large_dictionary.
READ_RARE_ROWS = READ_IN_ONE_PROCESS.replace("shuffle_seed=7", "num_splits=1")


def test_rare_large_rows_within_the_stated_bound(tmp_path: Path) -> None:
    """2,048 rows of 4 KiB and four of 24 MiB (6,000 times the others), one
    a step from row 1,000, read in their order with a budget of 96 MiB,
    torch batches (the cells become Python bytes, a copy): the peak over the
    imports within 1.25 * budget + 64 MiB + 2 * the largest row + 2 * the
    largest page charged whole + the largest dictionary page charged whole, as
    the read's counters give them."""
    cell, budget = 24 * MiB, 96 * MiB
    uri = rare_rows(tmp_path, 2048, cell, [1000 + 64 * i for i in range(4)])
    res = read_in_child(READ_RARE_ROWS, uri, budget)
    st = res["stats"]
    assert res["rows"] == 2048
    assert cell <= st["largest_row"] <= cell + 64, st
    assert cell <= st["large_page"] <= 2 * cell, st
    assert st["large_dictionary"] == 0, st
    allowance = 2 * st["largest_row"] + 2 * st["large_page"] + st["large_dictionary"]
    bound = budget * 5 // 4 + 64 * MiB + allowance
    assert res["over"] <= bound, (
        f"peak {res['over'] / MiB:.0f} MiB over the imports, bound {bound / MiB:.0f} MiB; "
        f"stats {st}"
    )


@pytest.mark.parametrize("plain", [False, True], ids=["croupier table", "plain Parquet"])
def test_a_step_of_a_large_row_crosses_alone_from_workers(tmp_path: Path, plain: bool) -> None:
    """Two DataLoader workers sharing steps send them in runs; a step holding a
    row far larger than the rest (8 MiB among rows of 4 KiB) crosses alone, in
    both workers' runs alike, so that neither a worker nor the training process
    holds a run of several such steps at once; the batches are those of one
    process. Plain Parquet without an offset index declares its pages by
    their headers alone."""
    cell, steps_of_large = 8 * MiB, [15, 16, 17, 18]
    # Row groups of 256 rows: the rows of 4 KiB are guessed from their own.
    uri = rare_rows(tmp_path, 2048, cell, [1000 + 64 * i for i in range(4)], 256, plain=plain)

    def make() -> cr.StreamingDataset:
        return cr.StreamingDataset(
            cr.open_table(uri),
            global_batch_size=64,
            num_splits=1,
            format="arrow",
            memory_budget=2 * WORKER_ALLOWANCE + 64 * MiB,
        )

    want = [b.column("id").to_pylist() for b in cr.DataLoader(make())]
    for step in steps_of_large:  # the table holds them where the test says
        assert any(i in want[step] for i in (1000, 1064, 1128, 1192))
    loader = cr.DataLoader(make(), num_workers=2, in_process=False)
    assert [b.column("id").to_pylist() for b in loader] == want
    sent: list[Any] = []
    slots: dict[Any, Any] = {}
    for part in loader._from_workers():
        part.batches(slots)  # learns its slot
        part.release(slots)  # a worker waits for room in its slots
        sent.append(part)
    runs = [(s.first, s.steps) for s in sent[::2]]
    assert [(s.first, s.steps) for s in sent[1::2]] == runs
    assert [t for first, n in runs for t in range(first, first + n)] == list(range(len(want)))
    for step in steps_of_large:
        assert (step, 1) in runs, runs
    assert max(n for _, n in runs) > 1  # the other steps still go in runs


def test_a_run_of_undeclared_large_rows_is_announced(tmp_path: Path) -> None:
    """Plain Parquet whose rows 992 to 1,011 hold one 1 MiB value from a
    dictionary page, among rows of 16 values of 4 KiB: no header says which
    rows are large, so the run holding step 15 (rows 960 to 1,023) crosses
    whole, and the training process warns (BudgetWarning) naming the run and
    its bytes; the batches are still those of one process. The same rows as
    a croupier table (no dictionary, its pages declared) cross without it."""
    rows, big = 2048, range(992, 1012)
    rng = np.random.default_rng(1)
    small = [rng.integers(0, 256, 4096, dtype=np.uint8).tobytes() for _ in range(16)]
    large = rng.integers(0, 256, MiB, dtype=np.uint8).tobytes()
    cells = pa.array([large if i in big else small[i % 16] for i in range(rows)], pa.binary())
    tbl = pa.table({"id": np.arange(rows), "cell": cells})
    (tmp_path / "plain").mkdir()
    # Batches of 32 rows: the 20 large rows are written in one, all from the
    # dictionary, before the writer falls back to plain pages.
    pq.write_table(
        tbl, tmp_path / "plain" / "part-0.parquet", row_group_size=256, write_batch_size=32
    )
    cr.create_table(f"file://{tmp_path}/croupier", tbl, row_group_rows=256)
    for form, announced in (("plain", True), ("croupier", False)):

        def make(form: str = form) -> cr.StreamingDataset:
            return cr.StreamingDataset(
                cr.open_table(f"file://{tmp_path}/{form}"),
                global_batch_size=64,
                num_splits=1,
                format="arrow",
                memory_budget=2 * WORKER_ALLOWANCE + 64 * MiB,
            )

        want = [b.column("id").to_pylist() for b in cr.DataLoader(make())]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = [
                b.column("id").to_pylist()
                for b in cr.DataLoader(make(), num_workers=2, in_process=False)
            ]
        assert got == want
        said = [str(w.message) for w in caught if issubclass(w.category, cr.BudgetWarning)]
        if announced:
            assert len(said) == 1, said
            assert "the run of steps 0 to 15 took" in said[0], said
        else:
            assert not said, said
