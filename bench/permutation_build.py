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

``--runs`` picks other builds of ``BOUNDED_RUNS`` by key (a filter with a hash
split, sequential and random splits, groups), ``--memories`` other
``build_memory`` values (MiB), and ``--section`` the section they go to::

    .venv/bin/python bench/permutation_build.py --bounded --rows 300_000_000 \\
        --runs shuffle,filter,hash,filter-hash,lengths,sequential --memories 256 \\
        --section "Permutation builds in bounded memory, 300M rows"

``--ranks 1,2,4`` measures instead builds on several processes: a table of N
rows of two int64 columns in 8 files of 8 row groups, built with a hash split
and a shuffle by ``python -m croupier.permute`` on 1, 2 and 4 processes,
started as torchrun starts its workers (a gloo group on this host). It reports
each build's wall time (the processes' start to the last one's exit, imports
and the group's start-up included), the build's own seconds (rank 0's
``build_seconds``), each rank's CPU time and peak RSS (from ``wait4``), beside
those of a process that only imports croupier and torch, and checks that every
build gave the same permutation, in the "## Permutation builds on several
processes" section::

    .venv/bin/python bench/permutation_build.py --ranks 1,2,4 --rows 20_000_000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
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


# The builds of --bounded: key (for --runs), name and builder steps.
BOUNDED_RUNS: list[tuple[str, str, dict[str, object]]] = [
    ("shuffle", "shuffle", {"shuffle": {"seed": 1}}),
    ("filter", "filter ~30 %, shuffle", {"filter": "problem_id % 10 < 3", "shuffle": {"seed": 1}}),
    ("hash", "hash split 9:1, shuffle", {"hash": True, "shuffle": {"seed": 1}}),
    (
        "filter-hash",
        "filter ~30 %, hash split 9:1, shuffle",
        {"filter": "problem_id % 10 < 3", "hash": True, "shuffle": {"seed": 1}},
    ),
    (
        "lengths",
        "hash split 9:1, lengths, clumps of 64",
        {"hash": True, "lengths": "problem_id", "shuffle": {"seed": 1, "clump_size": 64}},
    ),
    ("stored", "stored order", {}),
    ("sequential", "sequential split 9:1, stored order", {"sequential": True}),
    (
        "sequential-window",
        "sequential split 9:1, window shuffle",
        {"sequential": True, "shuffle": {"seed": 1, "window": 65536}},
    ),
    (
        "sequential-shuffle",
        "sequential split 9:1, shuffle",
        {"sequential": True, "shuffle": {"seed": 1}},
    ),
    ("random", "random split 9:1, shuffle", {"random": True, "shuffle": {"seed": 1}}),
    ("groups", "group_by problem_id, shuffle", {"group_by": "problem_id", "shuffle": {"seed": 1}}),
    (
        "group-rows",
        "group_by id (a row a group), shuffle",
        {"group_by": "id", "shuffle": {"seed": 1}},
    ),
]


# The builds, the build memories (MiB) and the RESULTS.md section of --bounded
# by default.
BOUNDED_DEFAULT = "shuffle,filter,hash,lengths,stored"
BOUNDED_MEMORIES = "256,1024"
BOUNDED_SECTION = "Permutation builds in bounded memory"


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
    if steps.get("sequential"):
        builder.split_sequential(ratios=[0.9, 0.1], split_names=["train", "val"])
    if steps.get("random"):
        builder.split_random(ratios=[0.9, 0.1], seed=1, split_names=["train", "val"])
    if "group_by" in steps:
        builder.group_by(str(steps["group_by"]))
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
    flags = f" --runs {args.runs}" if args.runs else ""
    if args.memories != BOUNDED_MEMORIES:
        flags += f" --memories {args.memories}"
    if args.section != BOUNDED_SECTION:
        flags += f' --section "{args.section}"'
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
    keys = (args.runs or BOUNDED_DEFAULT).split(",")
    memories = [int(m) << 20 for m in args.memories.split(",")]
    rows = []
    for key, name, steps in BOUNDED_RUNS:
        if key not in keys:
            continue
        for memory in memories:
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
        f"Generated by `bench/permutation_build.py --bounded --rows {args.rows}{flags}`. Table:"
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
    update_section(args.out, args.section, section)
    print(f"wrote {args.out}")


# The build of --ranks: croupier.permute's flags.
RANKS_FLAGS = ["--split-hash", "problem_id:9,1", "--split-names", "train,val"]
RANKS_FLAGS += ["--shuffle-seed", "1234", "--quiet", "--json"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_rusage(p: subprocess.Popen[str]) -> tuple[int, float, int]:
    """Reap ``p``: its exit status, CPU seconds (user and system) and peak RSS in bytes."""
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024


def run_ranks(table_uri: str, perm_dir: Path, world: int) -> dict[str, Any]:
    """Build with ``world`` processes of croupier.permute; the figures of the build."""
    shutil.rmtree(perm_dir, ignore_errors=True)
    port = str(free_port())
    argv = [sys.executable, "-m", "croupier.permute", table_uri, str(perm_dir), *RANKS_FLAGS]
    start = time.perf_counter()
    procs = []
    # Each rank writes to a file, read once they exit: rank 0's JSON names
    # every chunk, more than a pipe holds for a large table.
    with contextlib.ExitStack() as files:
        outs = [files.enter_context(tempfile.TemporaryFile("w+")) for _ in range(world)]
        for rank in range(world):
            env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK")}
            if world > 1:
                env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank))
                env.update(WORLD_SIZE=str(world), LOCAL_RANK=str(rank), GLOO_SOCKET_IFNAME="lo")
            procs.append(subprocess.Popen(argv, stdout=outs[rank], text=True, env=env))
        reaped = [wait_rusage(p) for p in procs]
        wall = time.perf_counter() - start
        outs[0].seek(0)
        out = outs[0].read()
    if any(code != 0 for code, _, _ in reaped):
        raise RuntimeError(f"{world} ranks: exit statuses {[c for c, _, _ in reaped]}")
    perm = json.loads(out)
    shutil.rmtree(perm_dir, ignore_errors=True)
    return {
        "wall": wall,
        "build": perm["build_seconds"],
        "id": perm["id"],
        "kept": perm["rows_kept"],
        "cpu": [c for _, c, _ in reaped],
        "rss": [r for _, _, r in reaped],
    }


def startup() -> tuple[float, int]:
    """CPU seconds and peak RSS of a process that only imports croupier and torch."""
    code = "import croupier, torch.distributed"
    p = subprocess.Popen([sys.executable, "-c", code], text=True)
    _, cpu, rss = wait_rusage(p)
    return cpu, rss


def ranks(args: argparse.Namespace, tmp: str) -> None:
    """The --ranks benchmark: one build on 1, 2, 4... processes."""
    load = os.getloadavg()[0]
    worlds = [int(w) for w in args.ranks.split(",")]
    folder = args.data or Path(tmp) / "ranks"
    row_group = max(args.rows // 64, 1)
    if folder.exists() and table_rows(folder) == args.rows:
        written = "reused"
    else:
        shutil.rmtree(folder, ignore_errors=True)
        secs = write_table(folder, args.rows, row_group, row_group * 8, int_columns)
        written = f"written in {secs:.0f} s"
    size = sum(p.stat().st_size for p in folder.glob("*.parquet"))
    files = len(list(folder.glob("*.parquet")))
    print(f"table: {args.rows:,} rows in {files} files, {size / 2**20:,.0f} MiB ({written})")
    table_uri = "file://" + str(folder.resolve())
    base_cpu, base_rss = startup()
    print(f"start-up alone: {base_cpu:.2f} CPU s, peak RSS {base_rss / 2**20:,.0f} MiB")
    rows, ids = [], set()
    for world in worlds:
        r = run_ranks(table_uri, Path(tmp) / "perm", world)
        ids.add(r["id"])
        cpu = " / ".join(f"{c:.1f}" for c in r["cpu"])
        rss = " / ".join(f"{m / 2**20:,.0f}" for m in r["rss"])
        rows.append(
            f"| {world} | {r['wall']:.1f} | {r['build']:.2f} | {args.rows / r['build']:,.0f}"
            f" | {cpu} | {sum(r['cpu']):.1f} | {sum(r['cpu']) - world * base_cpu:.1f} | {rss} |"
        )
        print(rows[-1], flush=True)
    same = "the same permutation" if len(ids) == 1 else f"{len(ids)} different permutations"
    section = [
        f"Generated by `bench/permutation_build.py --ranks {args.ranks} --rows {args.rows}`."
        f" Table: {args.rows:,} rows of two int64 columns (id sorted, problem_id uniform in"
        f" [0, 10⁶)), {size / 2**20:,.0f} MiB of zstd Parquet in {files} files, row groups of"
        f" {row_group:,} rows, local files. Each build: `python -m croupier.permute"
        f" {' '.join(RANKS_FLAGS)}` on W processes started as torchrun starts its workers"
        " (a gloo group on this host; W = 1: one process, no group), persisting to a local"
        ' folder. "wall": from starting the processes to the last one\'s exit, imports and'
        " the group's start-up included; \"build\": rank 0's `build_seconds`, from the"
        " build's start to its commit; rows/s: rows scanned over that. Each rank's CPU"
        " seconds (user and system) and peak RSS (VmHWM) come from `wait4` and include"
        f" the start-up: a process that only imports croupier and torch takes {base_cpu:.1f}"
        f" CPU s and {base_rss / 2**20:,.0f} MiB. Every W built {same}. The machine has"
        f" {os.cpu_count()} cores: W ranks share them, so the build's seconds say little of"
        " how W hosts would scale (and on a loaded machine W processes get W shares of the"
        " CPUs against others' one); the CPU seconds less the start-up's say what the"
        " exchanges and the spill through the store add to the work."
        f" Run on {machine((load, os.getloadavg()[0]))}",
        "",
        "| ranks | wall (s) | build (s) | rows/s | CPU s per rank | CPU s, all ranks"
        " | less start-up | peak RSS per rank (MiB) |",
        "|---:|---:|---:|---:|---|---:|---:|---|",
        *rows,
    ]
    update_section(args.out, "Permutation builds on several processes", section)
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
    ap.add_argument("--runs", help="--bounded: the builds to run, by key: shuffle,groups")
    ap.add_argument("--memories", default=BOUNDED_MEMORIES, help="--bounded: build_memory, MiB")
    ap.add_argument("--section", default=BOUNDED_SECTION, help="--bounded: RESULTS.md section")
    ap.add_argument("--ranks", help="build on this many processes each: 1,2,4")
    ap.add_argument("--child", nargs=3, metavar=("TABLE", "SQL", "PERM"), help=argparse.SUPPRESS)
    ap.add_argument("--bounded-child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.bounded_child:
        bounded_child(*args.bounded_child)
        return
    if args.bounded or args.ranks:
        tmp = tempfile.mkdtemp(prefix="croupier-bench-")
        try:
            (ranks if args.ranks else bounded)(args, tmp)
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
