"""The memory budget at its edges: a table of small rows with a few rows
hundreds of thousands of times larger, read with budgets smaller and larger
than one such row.

The table: ``--rows`` rows of an id and 200 random bytes (binary), but for
four rows in consecutive steps of the table's order (one a step), whose
cells hold ``--cell-mib`` MiB each; as a croupier table (``cr.create_table``
defaults) and as plain Parquet (pyarrow, one file, row groups of 16,384
rows, no page index). Each read runs in a fresh process: the resident memory
once torch, pyarrow and croupier are imported, then a ``StreamingDataset``
(``global_batch_size=64``, ``memory_budget`` of each ``--budgets-mib``) in
the table's order (``num_splits=1``) or a full shuffle (``shuffle_seed``),
read to the end
through ``cr.DataLoader`` with 0 or 2 worker processes (``in_process=False``),
each batch dropped as it comes; the peak resident memory (``VmHWM``, of the
process from the end of the imports, and with workers each worker's less the
resident memory after the imports, added) over those imports, against the
bound 1.25 times the budget + 64 MiB, and what the loader's own counters
say. A read that is refused says so.

``bench/run.py`` runs it as its ``edges`` part.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import results

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20


def bound(budget: int) -> int:
    """The resident memory above its imports croupier may hold with ``budget``."""
    return int(1.25 * budget) + 64 * MiB


def prepare(folder: Path, rows: int, cell: int) -> dict[str, str]:
    """Write the table in both forms under ``folder`` (once); their URIs."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    import croupier as cr

    folder = folder.resolve()
    out = {
        "croupier table": f"file://{folder}/croupier",
        "plain Parquet": f"file://{folder}/parquet",
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
    (folder / "done").touch()
    return out


def vm(pid: int | str, field: str) -> int:
    """``field`` of ``/proc/<pid>/status``, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


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
    try:
        ds = cr.StreamingDataset(
            cr.open_table(spec["uri"]),
            global_batch_size=64,
            memory_budget=spec["budget"],
            format=spec["format"],
            **({"num_splits": 1} if spec["seed"] is None else {"shuffle_seed": spec["seed"]}),
        )
        loader = cr.DataLoader(ds, num_workers=spec["workers"], in_process=spec["workers"] == 0)
        steps = 0
        it = iter(loader)
        for batch in it:
            del batch
            steps += 1
            if spec["workers"]:
                workers = getattr(it, "_workers", [])
                workers_peak = max(
                    workers_peak,
                    sum(vm(w.pid, "VmHWM") - imported for w in workers if w.is_alive()),
                )
        out["steps"] = steps
        out["stats"] = ds.stats() if spec["workers"] == 0 else {}
    except Exception as exc:  # the note says what it was
        out["error"] = f"{type(exc).__name__}: {exc}"
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
        if "memory_budget" in err and "InvalidArgumentError" in err:
            i = err.find("step ")
            return "refused: " + err[i : i + 120].split(":")[0] if i >= 0 else "refused"
        return err[:120]
    st = res.get("stats") or {}
    if not st:
        return f"{res['steps']} steps"
    return (
        f"{res['steps']} steps; held_peak {st['held_peak'] / MiB:.1f}"
        f" of {st['held_limit'] / MiB:.1f} MiB, ahead_peak {st['ahead_peak'] / MiB:.1f}"
        f" of {st['ahead_limit'] / MiB:.1f} MiB"
    )


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
        if (fmt == "torch" or w == 0) and (w == 0 or form == "croupier table")
    ]
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
        mark = "" if over is None or over <= bound(b * MiB) else " (over)"
        cells = [
            form,
            order,
            fmt,
            str(w),
            str(b),
            f"{over / MiB:,.0f}{mark}" if over is not None else "",
            f"{bound(b * MiB) / MiB:,.0f}",
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
        " resident memory (VmHWM, workers' added) less that after importing torch and"
        " croupier.",
        "",
        *lines,
    ]
    results.update_section(args.out, "The budget at its edges", head)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
