"""The memory budget at its edges: a table of small rows with a few rows
hundreds of thousands of times larger, read with budgets smaller and larger
than one such row, and a table of wide rows read by worker processes.

The table: ``--rows`` rows of an id and 200 random bytes (binary), but for
four rows in consecutive steps of the table's order (one a step), whose
cells hold ``--cell-mib`` MiB each; as a croupier table (``cr.create_table``
defaults) and as plain Parquet (pyarrow, one file, row groups of 16,384
rows, no page index). The wide rows: a croupier table of 8,192 rows of an
id and a list of 2,000 to 20,000 int32 values, read in a full shuffle with
64 MiB, and with 2 workers also with 64 MiB more than the 96 MiB each
worker sets aside (``croupier.dataset.WORKER_ALLOWANCE``): 256 MiB, 32 MiB
a worker, as 64 MiB gave each before the allowance. Each read runs in a
fresh process: the resident memory once torch, pyarrow and croupier are
imported, then a ``StreamingDataset``
(``global_batch_size=64``, ``memory_budget`` of each ``--budgets-mib``) in
the table's order (``num_splits=1``) or a full shuffle (``shuffle_seed``),
read to the end through ``cr.DataLoader`` with 0 or 2 worker processes
(``in_process=False``; with 2 also with 384 MiB, and the plain Parquet with
512 MiB), each batch dropped as it comes; the process tree's
growth as docs/tuning.md ("memory_budget is a bound") defines it: the peak
resident memory (``VmHWM``) of the process over what it held once torch and
croupier were imported, and with workers each worker's peak over what it
held once started, before croupier's library loaded in it (its
``worker_init_fn``, which runs first when ``GOMAXPROCS`` is in the
environment: it is set to the cores each worker would get), added (the fork
server the workers start from is their template, whose pages they share, and
is not counted), against the bound 1.25 times the budget + 64 MiB + twice
the largest row dealt + twice the largest data page charged whole + the
largest dictionary page charged whole (the read's ``largest_row``,
``large_page`` and ``large_dictionary``),
and what the loader's own counters say. A read that is refused says so.

``bench/run.py`` runs it as its ``edges`` part.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import results

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20
WIDE_ROWS = 8192  # of the wide-rows table
WIDE_BUDGET = 64  # MiB, the wide rows' budget
# The wide rows' budget with 2 workers that gives each 32 MiB beside the
# allowance set aside for it (croupier.dataset.WORKER_ALLOWANCE).
WIDE_WORKERS_BUDGET = WIDE_BUDGET + 2 * 96
# MiB: the rare rows read by 2 workers with 96 MiB each beside what each
# sets aside (the smaller budgets are refused for them).
WORKERS_BUDGET = 2 * 96 + 2 * 96
# MiB: the plain Parquet form read by 2 workers with 160 MiB each beside what
# each sets aside (with 96 its 121 MB dictionary page is larger than a
# worker's share, and the read is refused).
PLAIN_WORKERS_BUDGET = 2 * 96 + 2 * 160


def bound(budget: int, stats: dict[str, int] | None = None) -> int:
    """The resident memory above its imports croupier may hold with
    ``budget`` (docs/tuning.md, "memory_budget is a bound"): 1.25 times it
    and 64 MiB, and the allowance for rows far larger than the rest: twice
    the largest row dealt, twice the largest data page charged whole and the
    largest dictionary page charged whole, as the read's counters (``stats``)
    give them (with workers, each worker's, summed)."""
    stats = stats or {}
    allowance = (
        2 * stats.get("largest_row", 0)
        + 2 * stats.get("large_page", 0)
        + stats.get("large_dictionary", 0)
    )
    return int(1.25 * budget) + 64 * MiB + allowance


def prepare(folder: Path, rows: int, cell: int) -> dict[str, str]:
    """Write the table in both forms, and the wide rows, under ``folder``
    (once); their URIs."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    import croupier as cr

    folder = folder.resolve()
    out = {
        "croupier table": f"file://{folder}/croupier",
        "plain Parquet": f"file://{folder}/parquet",
        "wide rows": f"file://{folder}/wide",
    }
    if (folder / "done").exists():
        return out
    rng = np.random.default_rng(1)
    large = {rows // 4 + 64 * i for i in range(4)}  # one a step from a quarter in
    sizes = np.array([cell if i in large else 200 for i in range(rows)], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    data = pa.py_buffer(rng.integers(0, 256, int(offsets[-1]), dtype=np.uint8).tobytes())
    cells = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), rows, [None, pa.py_buffer(offsets.tobytes()), data]
    ).cast(pa.binary())
    tbl = pa.table({"id": pa.array(np.arange(rows, dtype=np.int64)), "cell": cells})
    cr.create_table(out["croupier table"], tbl)
    (folder / "parquet").mkdir(parents=True, exist_ok=True)
    pq.write_table(tbl, folder / "parquet" / "part-0.parquet", row_group_size=16384)
    lengths = rng.integers(2000, 20001, WIDE_ROWS)
    tokens = pa.ListArray.from_arrays(
        np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32),
        pa.array(rng.integers(0, 1 << 20, int(lengths.sum()), dtype=np.int32)),
    )
    cr.create_table(out["wide rows"], pa.table({"id": np.arange(WIDE_ROWS), "tokens": tokens}))
    (folder / "done").touch()
    return out


def vm(pid: int | str, field: str) -> int:
    """``field`` of ``/proc/<pid>/status``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def descendants(pid: int) -> list[int]:
    """The processes below ``pid``: with workers forked from a fork server, the
    server and its workers."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            out += [int(child), *descendants(int(child))]
    return out


# The folder where each worker writes its resident bytes once it has started
# (its imports done, before it reads), in a file named for its pid.
BASELINES = "CROUPIER_BENCH_BASELINES"


def note_baseline(_worker: int) -> None:
    """A worker_init_fn: what the worker holds before it reads, before
    croupier's library loads in it (``GOMAXPROCS`` in the environment leaves
    ``cr.DataLoader`` nothing to load before it runs)."""
    Path(os.environ[BASELINES], str(os.getpid())).write_text(str(vm("self", "VmRSS")))


def workers_growth(folder: str) -> int:
    """What the workers alive now have grown by at most past their baselines.
    A process without one (the fork server the workers start from) is their
    template, whose pages they share: not counted again."""
    grown = 0
    for pid in descendants(os.getpid()):
        base = Path(folder, str(pid))
        if base.exists():
            grown += max(vm(pid, "VmHWM") - int(base.read_text()), 0)
    return grown


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One read, in this process: its figures."""
    import torch  # noqa: F401  (imported before the baseline, as a trainer has it)

    import croupier as cr

    # The peak from here on: importing torch peaks above where it settles.
    Path("/proc/self/clear_refs").write_text("5")
    imported = vm("self", "VmRSS")
    out: dict[str, Any] = {}
    started = time.perf_counter()
    workers_peak = 0
    baselines = tempfile.mkdtemp(prefix="croupier-baselines-")
    os.environ[BASELINES] = baselines
    try:
        ds = cr.StreamingDataset(
            cr.open_table(spec["uri"]),
            global_batch_size=64,
            memory_budget=spec["budget"],
            format=spec["format"],
            **({"num_splits": 1} if spec["seed"] is None else {"shuffle_seed": spec["seed"]}),
        )
        if spec["workers"]:  # croupier's library loads after the baseline (see note_baseline)
            cores = len(os.sched_getaffinity(0))
            os.environ.setdefault("GOMAXPROCS", str(max(1, cores // spec["workers"])))
        loader = cr.DataLoader(
            ds,
            num_workers=spec["workers"],
            in_process=spec["workers"] == 0,
            **({"worker_init_fn": note_baseline} if spec["workers"] else {}),
        )
        steps = 0
        it = iter(loader)
        for batch in it:
            del batch
            steps += 1
            if spec["workers"]:  # high-water marks: the last look sees each peak
                workers_peak = max(workers_peak, workers_growth(baselines))
        out["steps"] = steps
        out["stats"] = ds.stats()
    except Exception as exc:  # the note says what it was
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(baselines, ignore_errors=True)
    out["seconds"] = time.perf_counter() - started
    out["over_import"] = vm("self", "VmHWM") - imported + workers_peak
    return out


def run(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    """One read in a fresh process."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'python'}:{ROOT / 'bench'}"}
    proc = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if proc.returncode != 0:
        return {"error": "failed: " + (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def note(res: dict[str, Any]) -> str:
    """What the loader said: refused (and why, shortly), or its counters."""
    if "error" in res:
        err = res["error"]
        if found := re.search(
            r"memory_budget \d+ bytes is too small for \d+ DataLoader workers", err
        ):
            return "refused: " + found.group(0)  # the workers' allowances leave nothing
        if "memory_budget" in err and "InvalidArgumentError" in err:
            # From the step named to the budget, without the advice after
            # (nor, from a worker, the traceback around it).
            step = re.search(r"steps? \d+", err)
            said = err[step.start() if step else 0 :].splitlines()[0]
            return "refused: " + said.split(": the page")[0].split(": raise")[0]
        return err[:120]
    st = res.get("stats") or {}
    if not st:
        return f"{res['steps']} steps"
    out = (
        f"{res['steps']} steps; held_peak {st['held_peak'] / MiB:.1f}"
        f" of {st['held_limit'] / MiB:.1f} MiB, ahead_peak {st['ahead_peak'] / MiB:.1f}"
        f" of {st['ahead_limit'] / MiB:.1f} MiB"
    )
    if st.get("large_page") or st.get("large_dictionary"):
        out += (
            f"; largest_row {st['largest_row'] / MiB:.1f}, large_page"
            f" {st['large_page'] / MiB:.1f}, large_dictionary"
            f" {st['large_dictionary'] / MiB:.1f} MiB"
        )
    if "sent_peak" in st:  # workers: the most of one's kept rows, the sums of the rest
        out += f", sent_peak {st['sent_peak'] / MiB:.1f} of {st['sent_limit'] / MiB:.1f} MiB"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--cell-mib", type=float, default=60 / 1.048576)
    ap.add_argument("--budgets-mib", default="32,128")
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument(
        "--only",
        choices=["croupier table", "plain Parquet", "wide rows"],
        help="run the cases of this table alone",
    )
    ap.add_argument("--cache", type=Path, default=ROOT / "build" / "bench")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("RESULTS.md"))
    ap.add_argument("--command", default="python bench/budget_edges.py")
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    cell = int(args.cell_mib * MiB)
    uris = prepare(args.cache / f"edges-{args.rows}-{cell}", args.rows, cell)
    load = os.getloadavg()[0]
    lines = [
        "| table | order | format | workers | budget (MiB) | RSS over imports (MiB) | bound (MiB)"
        " | loader |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    failed = False
    cases = [
        (form, order, fmt, w, b)
        for b in (int(x) for x in args.budgets_mib.split(","))
        for form in uris
        for order in ("stored", "full")
        for fmt in ("torch", "arrow")
        for w in (int(x) for x in args.workers.split(","))
        if (fmt == "torch" or w == 0)
        and (w == 0 or form == "croupier table")
        and form != "wide rows"
    ]
    cases += [
        (form, order, "torch", 2, WORKERS_BUDGET)
        for form in ("croupier table", "plain Parquet")
        for order in ("stored", "full")
    ]
    cases += [
        ("plain Parquet", order, "torch", 2, PLAIN_WORKERS_BUDGET) for order in ("stored", "full")
    ]
    cases += [("wide rows", "full", "torch", w, WIDE_BUDGET) for w in (0, 2)]
    cases += [("wide rows", "full", fmt, 2, WIDE_WORKERS_BUDGET) for fmt in ("torch", "arrow")]
    if args.only:
        cases = [case for case in cases if case[0] == args.only]
    for form, order, fmt, w, b in cases:
        spec = {
            "uri": uris[form],
            "budget": b * MiB,
            "format": fmt,
            "workers": w,
            "seed": 7 if order == "full" else None,
        }
        res = run(spec, args.timeout)
        failed = failed or res.get("error", "").startswith("failed")
        over = res.get("over_import")
        limit = bound(b * MiB, res.get("stats"))
        mark = "" if over is None or over <= limit else " (over)"
        cells = [
            form,
            order,
            fmt,
            str(w),
            str(b),
            f"{over / MiB:,.0f}{mark}" if over is not None else "",
            f"{limit / MiB:,.0f}",
            note(res),
        ]
        lines.append("| " + " | ".join(cells) + " |")
        print(lines[-1], flush=True)
    head = [
        f"Generated by `{args.command}`, run on {results.machine((load, os.getloadavg()[0]))}",
        "",
        f"Table: {args.rows:,} rows of an id and 200 random bytes (binary), but for four"
        f" rows, one a step of 64 rows from row {args.rows // 4:,}, whose cells hold"
        f" {cell / MiB:,.1f} MiB each; a croupier table and plain Parquet (pyarrow, row"
        " groups of 16,384 rows, no page index). Each read in a fresh process, to the"
        " end of the epoch, through `cr.DataLoader`; RSS over imports is the peak"
        " resident memory (VmHWM) less that after importing torch and croupier, with"
        " workers each worker's peak less what it held once started (before croupier's"
        " library loaded in it) added: the process tree's growth (docs/tuning.md). The"
        " bound: 1.25 times the budget + 64 MiB + twice the largest row dealt + twice the"
        " largest page charged whole + the largest dictionary page charged whole"
        " (`stats()`: `largest_row`, `large_page`, `large_dictionary`; with workers each"
        " worker's, summed). With 2 workers they are also read with"
        f" {WORKERS_BUDGET} MiB (96 MiB a worker beside the 96 MiB each sets aside), and"
        f" the plain Parquet with {PLAIN_WORKERS_BUDGET} MiB (160 MiB a worker). Wide"
        f" rows: a croupier table of {WIDE_ROWS:,} rows of an id and a list of"
        f" 2,000 to 20,000 int32 values, in a full shuffle with {WIDE_BUDGET} MiB, and"
        f" with 2 workers {WIDE_WORKERS_BUDGET} MiB (32 MiB a worker beside the 96 MiB"
        " each sets aside).",
        "",
        *lines,
    ]
    results.update_section(args.out, "The budget at its edges", head)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
