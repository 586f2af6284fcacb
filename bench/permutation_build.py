"""Permutation build: seconds, rows/s, peak memory and row groups skipped.

Writes a table of N rows (id int64 sorted, reward float32 ~ N(0, 1), role string
of 3 values, problem_id int64) as Parquet with row groups of 1M rows, then builds
a hash-split (problem_id, 9:1), shuffled permutation of it with several filters:

- none: every row is kept;
- ``reward > 0.5244``: keeps ~30 % of the rows, every row group is read;
- ``problem_id % 10 < 3``: keeps ~30 %, every row group is read;
- ``id < 0.3·N``: keeps 30 %, and the statistics of ~70 % of the row groups rule
  it out, so they are not read.

Each build runs in its own child process that imports croupier, opens the table
and calls ``persist``; its peak resident memory (VmHWM) is that of a process that
does only the build. Results are printed and written to the "## Permutation
build, <N> rows" section of ``bench/RESULTS.md`` (the rest of the file is kept).

Usage::

    .venv/bin/python bench/permutation_build.py                      # 10M rows
    .venv/bin/python bench/permutation_build.py --rows 100_000_000   # ~1.5 GB of Parquet
    .venv/bin/python bench/permutation_build.py --data /big/disk/t --keep

The table goes to a temporary folder unless ``--data`` names one; an existing
table there with the right row count is reused.

``--bounded`` measures instead the build's memory against ``build_memory``: a
table of N rows of two int64 columns (id sorted, problem_id random), written
one row group at a time, built with and without a filter, with a hash split,
with lengths and clumps, and in stored order, each at 256 MiB and 1 GiB of
``build_memory``, in a child process each. It reports rows scanned per second
and per CPU second, the peak RSS (VmHWM) and what the build added to it, against
``build_memory``, in the "## Permutation builds in bounded memory" section::

    .venv/bin/python bench/permutation_build.py --bounded --rows 100_000_000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from measure import peak_rss
from results import machine, update_section

ROLES = pa.array(["user", "assistant", "system"])


def rollout_columns(rng: np.random.Generator, first: int, n: int) -> dict[str, pa.Array]:
    """Rows ``first .. first+n`` of the rollout-like table: id, reward, role, problem_id."""
    roles = pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 3, n, dtype=np.int8)), ROLES)
    return {
        "id": pa.array(np.arange(first, first + n, dtype=np.int64)),
        "reward": pa.array(rng.standard_normal(n, dtype=np.float32)),
        "role": roles.cast(pa.string()),
        "problem_id": pa.array(rng.integers(0, 1_000_000, n, dtype=np.int64)),
    }


def int_columns(rng: np.random.Generator, first: int, n: int) -> dict[str, pa.Array]:
    """Rows ``first .. first+n`` of the table of two int64 columns: id, problem_id."""
    return {
        "id": pa.array(np.arange(first, first + n, dtype=np.int64)),
        "problem_id": pa.array(rng.integers(0, 1_000_000, n, dtype=np.int64)),
    }


def write_table(
    folder: Path,
    rows: int,
    row_group: int,
    rows_per_file: int,
    columns: Callable[[np.random.Generator, int, int], dict[str, pa.Array]] = rollout_columns,
) -> float:
    """Write a table of ``columns`` one row group at a time, in files of
    ``rows_per_file`` rows; returns the seconds it took."""
    start = time.perf_counter()
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(1)
    writer: pq.ParquetWriter | None = None
    for first in range(0, rows, row_group):
        batch = pa.table(columns(rng, first, min(row_group, rows - first)))
        if first % rows_per_file == 0:
            if writer is not None:
                writer.close()
            path = folder / f"part-{first // rows_per_file:05d}.parquet"
            writer = pq.ParquetWriter(path, batch.schema, compression="zstd")
        assert writer is not None
        writer.write_table(batch, row_group_size=row_group)
    if writer is not None:
        writer.close()
    return time.perf_counter() - start


def table_rows(folder: Path) -> int:
    return sum(pq.ParquetFile(p).metadata.num_rows for p in sorted(folder.glob("*.parquet")))


def child(table_uri: str, sql: str, perm_uri: str) -> None:
    """Build one permutation and print its figures as JSON (runs in a child process)."""
    import croupier as cr

    tbl = cr.open_table(table_uri)
    before = peak_rss()
    builder = cr.PermutationBuilder(tbl)
    if sql:
        builder.filter(sql)
    builder.split_hash(["problem_id"], [9, 1], split_names=["train", "val"]).shuffle(seed=1234)
    start = time.perf_counter()
    perms = builder.persist(perm_uri, progress=False)
    seconds = time.perf_counter() - start
    prov = perms.provenance
    print(
        json.dumps(
            {
                "seconds": seconds,
                "hwm": peak_rss(),
                "hwm_before": before,
                "rows": prov["rows_scanned"],
                "kept": prov["rows_kept"],
                "splits": prov["splits"],
                "row_groups": prov["row_groups"],
                "skipped": prov["row_groups_skipped"],
            }
        )
    )


# The builds of --bounded: name and builder steps.
BOUNDED_RUNS: list[tuple[str, dict[str, object]]] = [
    ("shuffle", {"shuffle": {"seed": 1}}),
    ("filter ~30 %, shuffle", {"filter": "problem_id % 10 < 3", "shuffle": {"seed": 1}}),
    ("hash split 9:1, shuffle", {"hash": True, "shuffle": {"seed": 1}}),
    (
        "hash split 9:1, lengths, clumps of 64",
        {"hash": True, "lengths": "problem_id", "shuffle": {"seed": 1, "clump_size": 64}},
    ),
    ("stored order", {}),
]


def bounded_child(table_uri: str, steps_json: str, perm_uri: str) -> None:
    """Build one permutation of --bounded and print its figures as JSON."""
    import resource

    import croupier as cr

    steps = json.loads(steps_json)
    tbl = cr.open_table(table_uri)
    before = peak_rss()
    builder = cr.PermutationBuilder(tbl)
    if "filter" in steps:
        builder.filter(steps["filter"])
    if steps.get("hash"):
        builder.split_hash(["problem_id"], [9, 1], split_names=["train", "val"])
    if "lengths" in steps:
        builder.lengths(steps["lengths"])
    if "shuffle" in steps:
        builder.shuffle(**steps["shuffle"])
    usage = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    perms = builder.persist(perm_uri, progress=False, build_memory=steps["memory"])
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
    prov = perms.provenance
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cpu": cpu,
                "hwm": peak_rss(),
                "hwm_before": before,
                "rows": prov["rows_scanned"],
                "kept": prov["rows_kept"],
            }
        )
    )


def run_child(args: list[str], perm_dir: Path) -> dict[str, Any]:
    """Run this script as a child with args and the permutation's URI; its JSON."""
    shutil.rmtree(perm_dir, ignore_errors=True)
    out = subprocess.run(
        [sys.executable, __file__, *args, "file://" + str(perm_dir)],
        check=True,
        capture_output=True,
        text=True,
    )
    shutil.rmtree(perm_dir, ignore_errors=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bounded(args: argparse.Namespace, tmp: str) -> None:
    """The --bounded benchmark: build memory against build_memory."""
    load = os.getloadavg()[0]
    folder = args.data or Path(tmp) / "ints"
    if folder.exists() and table_rows(folder) == args.rows:
        written = "reused"
    else:
        shutil.rmtree(folder, ignore_errors=True)
        secs = write_table(folder, args.rows, args.row_group, args.rows_per_file, int_columns)
        written = f"written in {secs:.0f} s"
    size = sum(p.stat().st_size for p in folder.glob("*.parquet"))
    print(f"table: {args.rows:,} rows, {size / 2**20:,.0f} MiB of Parquet ({written})")
    table_uri = "file://" + str(folder.resolve())
    rows = []
    for name, steps in BOUNDED_RUNS:
        for memory in (256 << 20, 1 << 30):
            run = {**steps, "memory": memory}
            r = run_child(["--bounded-child", table_uri, json.dumps(run)], Path(tmp) / "perm")
            added, secs = int(r["hwm"]) - int(r["hwm_before"]), r["seconds"]
            rows.append(
                f"| {name} | {memory >> 20:,} | {secs:.1f} | {r['rows'] / secs:,.0f}"
                f" | {r['rows'] / r['cpu']:,.0f} | {r['hwm'] / 2**20:,.0f} | {added / 2**20:,.0f}"
                f" | {added / memory:.2f} | {r['kept']:,} |"
            )
            print(rows[-1], flush=True)
    section = [
        f"Generated by `bench/permutation_build.py --bounded --rows {args.rows}`. Table:"
        f" {args.rows:,} rows of two int64 columns (id sorted, problem_id uniform in"
        f" [0, 10⁶)), {size / 2**20:,.0f} MiB of zstd Parquet, row groups of"
        f" {args.row_group:,} rows, local files. Each build runs in a child process that"
        ' imports croupier and opens the table first ("before": the peak RSS, VmHWM,'
        ' then), and persists to a local folder with `build_memory` as shown; "added"'
        ' is the peak RSS less that, the build\'s own, and "÷ build_memory" that over'
        " `build_memory`. Rows scanned per CPU second count the child's user and system"
        " time during the build, every thread's. Run on"
        f" {machine((load, os.getloadavg()[0]))}",
        "",
        "| build | build_memory (MiB) | build (s) | rows scanned/s | rows/CPU-s"
        " | peak RSS (MiB) | added (MiB) | ÷ build_memory | rows kept |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
    ]
    update_section(args.out, "Permutation builds in bounded memory", section)
    print(f"wrote {args.out}")


def build(table_uri: str, sql: str, perm_dir: Path) -> dict[str, object]:
    shutil.rmtree(perm_dir, ignore_errors=True)
    out = subprocess.run(
        [sys.executable, __file__, "--child", table_uri, sql, "file://" + str(perm_dir)],
        check=True,
        capture_output=True,
        text=True,
    )
    shutil.rmtree(perm_dir, ignore_errors=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=lambda s: int(s.replace("_", "")), default=10_000_000)
    ap.add_argument("--row-group", type=int, default=1_000_000)
    ap.add_argument("--rows-per-file", type=int, default=10_000_000)
    ap.add_argument("--data", type=Path, default=None, help="folder for the table")
    ap.add_argument("--keep", action="store_true", help="keep the table in --data")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("RESULTS.md"))
    ap.add_argument("--bounded", action="store_true", help="build memory against build_memory")
    ap.add_argument("--child", nargs=3, metavar=("TABLE", "SQL", "PERM"), help=argparse.SUPPRESS)
    ap.add_argument("--bounded-child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.bounded_child:
        bounded_child(*args.bounded_child)
        return
    if args.bounded:
        tmp = tempfile.mkdtemp(prefix="croupier-bench-")
        try:
            bounded(args, tmp)
        finally:
            if not (args.keep and args.data):
                shutil.rmtree(tmp, ignore_errors=True)
        return

    load = os.getloadavg()[0]
    tmp = tempfile.mkdtemp(prefix="croupier-bench-")
    try:
        folder = args.data or Path(tmp) / "table"
        if folder.exists() and table_rows(folder) == args.rows:
            write_seconds = None
        else:
            shutil.rmtree(folder, ignore_errors=True)
            write_seconds = write_table(folder, args.rows, args.row_group, args.rows_per_file)
        size = sum(p.stat().st_size for p in folder.glob("*.parquet"))
        written = "reused" if write_seconds is None else f"written in {write_seconds:.0f} s"
        print(f"table: {args.rows:,} rows, {size / 2**20:,.0f} MiB of Parquet ({written})")
        table_uri = "file://" + str(folder.resolve())
        n = args.rows
        runs = [
            ("none", ""),
            ("reward > 0.5244 (~30 %)", "reward > 0.5244"),
            ("problem_id % 10 < 3 (~30 %)", "problem_id % 10 < 3"),
            ("id < 0.3·N (statistics skip)", f"id < {int(n * 0.3)}"),
        ]
        results = []
        for name, sql in runs:
            r = build(table_uri, sql, Path(tmp) / "perm")
            results.append((name, sql, r))
            print(
                f"{name:32s} {r['seconds']:7.2f} s {r['rows'] / r['seconds']:14,.0f} rows/s"
                f"  peak RSS {r['hwm'] / 2**20:7,.0f} MiB  kept {r['kept']:>12,}"
                f"  row groups skipped {r['skipped']}/{r['row_groups']}"
            )
    finally:
        if not (args.keep and args.data):
            shutil.rmtree(tmp, ignore_errors=True)
            if args.data and not args.keep:
                shutil.rmtree(args.data, ignore_errors=True)

    rows_label = f"{n / 1e6:g}M" if n >= 1_000_000 else f"{n:,}"
    section = [
        f"Generated by `bench/permutation_build.py --rows {n}`. Table: {n:,} rows (id int64"
        " sorted, reward float32, role string, problem_id int64),"
        f" {size / 2**20:,.0f} MiB of zstd Parquet, row groups of {args.row_group:,} rows,"
        ' local files. Each build: the filter, `split_hash(["problem_id"], [9, 1])`,'
        " `shuffle(seed=1234)`, persisted to a local folder, in a child process whose"
        f" peak RSS (VmHWM) is shown. Run on {machine((load, os.getloadavg()[0]))}",
        "",
        "| filter | build (s) | rows scanned/s | peak RSS (MiB) | RSS before the build (MiB)"
        " | rows kept | row groups skipped |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, _, r in results:
        section.append(
            f"| {name} | {r['seconds']:.2f} | {r['rows'] / r['seconds']:,.0f}"
            f" | {r['hwm'] / 2**20:,.0f} | {r['hwm_before'] / 2**20:,.0f} | {r['kept']:,}"
            f" | {r['skipped']}/{r['row_groups']} ({r['skipped'] / max(r['row_groups'], 1):.0%}) |"
        )
    update_section(args.out, f"Permutation build, {rows_label} rows", section)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
