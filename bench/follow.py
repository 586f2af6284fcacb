"""Following a growing croupier table against reading a pinned version of it.

A croupier table of ``--rows`` rollouts (``id``, a ``tokens`` list of 16 to 112
int32 values, ``reward``) is written as ``--versions`` appends of equal size,
on each ``--storage``: local files, the local S3-compatible server
(``internal/s3serve``, started as ``bench/loader_throughput.py`` starts it), and
that server waiting ``--s3-latency`` ms before it serves each request, as a
distant store delays the first byte (the tables are written before the delay is
set). Its rows are then read once, in torch format with the token lists packed,
``--global-batch-size`` rows a step, two ways, in turn ``--repeats`` times, with
the wall time and the process's CPU time of each read:

- pinned: a ``StreamingDataset`` over a shuffled permutation of the latest
  version, opened afresh for each read as a training job opens it (the
  permutation's build is not timed);
- following: a ``FollowingDataset`` from version 1, rounds of
  ``--rows-per-round`` rows, no replay; it ends when ``wait_timeout`` passes
  after the last round, a wait not timed.

Then the latency from commit to first dealt (from ``Table.append`` returning,
so a step dealt before the writer's call returned counts negative): a ``FollowingDataset`` that has
dealt everything waits (one version a round) while this process appends a
version of one step's rows every ``--gap`` seconds; for each, the time from
``Table.append`` returning (the version committed) to the step holding its
rows reaching the loop, at poll intervals of 20 and 200 ms: the listing that
finds the version comes up to one poll interval after the commit.
``bench/run.py`` runs this as its ``follow`` part.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import loader_throughput
import measure
import numpy as np
import pyarrow as pa
import results

BENCH = Path(__file__).resolve().parent
WAIT = 0.5  # seconds of waiting that ends the following read; not timed
STORAGES = ("file", "s3", "s3+latency")


def rollouts(start: int, n: int, rng: np.random.Generator) -> pa.Table:
    """Rows ``start .. start+n``."""
    ids = np.arange(start, start + n, dtype=np.int64)
    lengths = rng.integers(16, 113, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    tokens = pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(rng.integers(0, 50_000, offsets[-1], dtype=np.int32))
    )
    return pa.table({"id": ids, "tokens": tokens, "reward": rng.random(n).astype(np.float32)})


def read(ds: Any, base: int) -> tuple[int, float, float, int]:
    """Rows of one pass over ``ds``; the seconds and CPU seconds it took, less the
    wait that ended it; and the most resident bytes the process held during it
    above ``base``."""
    import croupier as cr

    measure.reset_peak_rss()
    rows, start, cpu = 0, time.perf_counter(), time.process_time()
    last, last_cpu = start, cpu
    for batch in ds:
        rows += len(batch["id"])
        last, last_cpu = time.perf_counter(), time.process_time()
    if isinstance(ds, cr.FollowingDataset):
        assert ds.stats()["waited_out"]
    return rows, last - start, last_cpu - cpu, measure.peak_rss() - base


def write(uri: str, args: argparse.Namespace) -> None:
    """The table of ``--rows`` rows in ``--versions`` appends at ``uri``."""
    import croupier as cr

    rng = np.random.default_rng(1)
    per = args.rows // args.versions
    table = cr.create_table(uri, rollouts(0, per, rng))
    for v in range(1, args.versions):
        table.append(rollouts(v * per, per, rng))


# A read's best figures over the repeats: rows, seconds, CPU seconds; and its
# most resident bytes over those before it, the most of any repeat.
Figures = tuple[int, float, float, int]


def throughput(
    uri: str, perm_folder: Path, args: argparse.Namespace
) -> tuple[dict[str, Figures], list[float]]:
    """The pinned and following reads of the table at ``uri``: each one's fastest
    figures, and following's rows/s over pinned's in each repeat."""
    import torch  # noqa: F401  (imported by the reads: its pages count in the base)

    import croupier as cr

    base = measure.rss()  # after the imports
    g = args.global_batch_size
    perm_uri = "file://" + str(perm_folder)
    cr.PermutationBuilder(cr.open_table(uri)).shuffle(seed=1).persist(perm_uri, progress=False)
    best: dict[str, Figures] = {}
    ratios = []
    for _ in range(args.repeats):
        # Both reads open what they read afresh, as a training job starts:
        # each reads the footers of the files it deals from the store.
        pinned = cr.StreamingDataset(
            cr.open_permutations(perm_uri)["all"], global_batch_size=g, shuffle_seed=1
        )
        follow = cr.Follow(rows_per_round=args.rows_per_round, wait_timeout=WAIT)
        following = cr.FollowingDataset(uri, follow, global_batch_size=g, shuffle_seed=1)
        rate = {}
        for name, ds in (("pinned", pinned), ("following", following)):
            rows, seconds, cpu, peak = read(ds, base)
            rate[name] = rows / seconds
            old = best.get(name, (rows, seconds, cpu, peak))
            best[name] = (rows, min(seconds, old[1]), min(cpu, old[2]), max(peak, old[3]))
            ds.close()
        ratios.append(rate["following"] / rate["pinned"])
    return best, ratios


def latencies(uri: str, args: argparse.Namespace, poll: float) -> list[float]:
    """Seconds from each commit to its step reaching the loop."""
    import croupier as cr

    table = cr.open_table(uri)
    first = table.versions()[-1] + 1  # the versions this measure appends
    follow = cr.Follow(start_version=first, wait_timeout=30.0, poll_interval=poll)
    ds = cr.FollowingDataset(uri, follow, global_batch_size=args.global_batch_size,
                             columns=["id"], format="numpy")  # fmt: skip
    committed: dict[int, float] = {}
    rng = np.random.default_rng(7)

    def append() -> None:
        start = table.num_rows  # ids past the rows so far
        for k in range(args.commits):
            time.sleep(args.gap)
            v = table.append(
                rollouts(start + k * args.global_batch_size, args.global_batch_size, rng)
            )
            committed[v] = time.perf_counter()

    writer = threading.Thread(target=append)
    writer.start()
    out = []
    for batch in ds:
        arrived, version = time.perf_counter(), int(batch["_version"][0])
        while version not in committed:  # dealt before append returned to the writer
            time.sleep(0.0001)
        out.append(arrived - committed[version])
        if len(out) == args.commits:
            break
    writer.join()
    ds.close()
    return out


def label(storage: str, args: argparse.Namespace) -> str:
    """How the report names a storage."""
    return {"file": "local files", "s3": "S3", "s3+latency": f"S3 +{args.s3_latency:g} ms"}[storage]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--versions", type=int, default=100)
    ap.add_argument("--rows-per-round", type=int, default=20_000)
    ap.add_argument("--global-batch-size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--commits", type=int, default=20, help="appends timed for latency")
    ap.add_argument("--gap", type=float, default=0.1, help="seconds between timed appends")
    ap.add_argument("--storage", nargs="+", choices=STORAGES, default=list(STORAGES))
    ap.add_argument("--s3-latency", type=float, default=50, help="ms before each S3 request")
    ap.add_argument("--out", type=Path, default=BENCH / "RESULTS.md")
    ap.add_argument("--command", default="python bench/follow.py")
    args = ap.parse_args(argv)

    load = os.getloadavg()[0]
    g = args.global_batch_size
    per = args.rows // args.versions
    figures: dict[str, tuple[dict[str, Figures], list[float]]] = {}
    lat: dict[str, dict[float, list[float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folders = {s: Path(tmp) / s.replace("+", "-") for s in args.storage}
        for f in folders.values():
            f.mkdir()
        uris = {s: "file://" + str(f / "rollouts") for s, f in folders.items()}
        remote = [s for s in args.storage if s != "file"]
        server = None
        if remote:
            server = loader_throughput.S3Server.start(Path(tmp), {s: folders[s] for s in remote})
            uris.update({s: server.uris[s] for s in remote})
        try:
            for s in args.storage:
                write(uris[s], args)
            for s in args.storage:
                if server:
                    measure.set_server_delay(
                        server.control, args.s3_latency if s == "s3+latency" else 0
                    )
                figures[s] = throughput(uris[s], Path(f"{folders[s]}-perm"), args)
                lat[s] = {poll: sorted(latencies(uris[s], args, poll)) for poll in (0.02, 0.2)}
        finally:
            if server:
                server.close()

    def pct(xs: list[float], q: float) -> float:
        return 1e3 * xs[min(int(q * len(xs)), len(xs) - 1)]

    names = [label(s, args) for s in args.storage]
    lines = [
        f"Generated by `{args.command}` (`bench/follow.py`), run on"
        f" {results.machine((load, os.getloadavg()[0]))}",
        f"Versions: {results.versions([])}.",
        "",
        f"{args.rows:,} rows (`id`, `tokens`: 16 to 112 int32 values, `reward`) written as"
        f" {args.versions} appends of {per:,} rows to a croupier table on each storage:"
        " local files; S3, the local S3-compatible server (`internal/s3test`, in memory,"
        f" run by `internal/s3serve`); S3 +{args.s3_latency:g} ms, that server waiting"
        f" {args.s3_latency:g} ms before it serves each request, as a distant store delays the"
        " first byte. Each table is read once in torch format, tokens packed,"
        f" {g} rows a step, two ways, in turn {args.repeats} times (figures: the fastest"
        " wall time and the least CPU time of the process; peak RSS: the most resident"
        " bytes the process held during a read less those it held after its imports, the"
        " most of any repeat, which counts what the Go heap kept of the reads before; the"
        " default memory budget, 512 MiB): pinned, a `StreamingDataset`"
        " over a shuffled permutation (on local files) of the latest version, opened"
        " afresh for each read (its build is not timed); following, a `FollowingDataset`"
        f" from version 1 in rounds of {args.rows_per_round:,} rows (the wait after its last"
        " round is not timed). Each read's time runs from its first `next` to its last"
        " batch.",
        "",
        "| read | rows | "
        + " | ".join(f"{n}: rows/s | {n}: CPU s | {n}: peak RSS MiB" for n in names)
        + " |",
        "|---|---:|" + "---:|---:|---:|" * len(names),
    ]
    for read_ in ("pinned", "following"):
        cells = []
        for s in args.storage:
            rows, seconds, cpu, peak = figures[s][0][read_]
            cells += [f"{rows / seconds:,.0f}", f"{cpu:.2f}", f"{peak / 2**20:.0f}"]
        lines.append(
            f"| {read_} | {figures[args.storage[0]][0][read_][0]:,} | " + " | ".join(cells) + " |"
        )
    ratios = []
    for s, n in zip(args.storage, names, strict=True):
        best, each = figures[s]
        (fr, fs, fc, _), (pr, ps, pc, _) = best["following"], best["pinned"]
        ratios.append(
            f"{fr / fs / (pr / ps):.2f} on {n} (repeats {min(each):.2f} to {max(each):.2f};"
            f" rows per CPU second {fr / fc / (pr / pc):.2f})"
        )
    lines += [
        "",
        "Following ÷ pinned, rows/s: " + "; ".join(ratios) + ". A round shuffles the rows of"
        " its own versions only, so its steps read fewer data files than the pinned read's,"
        " which shuffles every row; each round opens a stream of its own, once the round"
        " before has decoded its rows, sharing that one's memory budget, and reads the"
        " footers of its files as soon as the round before is open. What following reads"
        " beyond the pinned read: the latest manifest (once, here: every version has"
        " landed), the listings of the versions, and once more the page or two holding the"
        " newest rows, which a round carries into the next. Following deals"
        " the rows of full steps only: those left past the last round's last step wait for"
        " a next round.",
        "",
        f"Commit to first dealt: {args.commits} appends of one step's rows, one every"
        f" {args.gap:g} s, each a round of its own; milliseconds from `Table.append` returning"
        " to the step reaching the loop:",
    ]
    for s, n in zip(args.storage, names, strict=True):
        lines += [
            "",
            f"{n}:",
            "",
            "| poll interval | p50 (ms) | p90 (ms) | max (ms) |",
            "|---|---:|---:|---:|",
        ]
        for poll, xs in lat[s].items():
            p50, p90, most = pct(xs, 0.5), pct(xs, 0.9), 1e3 * xs[-1]
            lines.append(f"| {poll * 1e3:.0f} ms | {p50:.1f} | {p90:.1f} | {most:.1f} |")
    print("\n".join(lines))
    results.update_section(args.out, "Following a growing table", lines)
    print(f"wrote the Following a growing table section of {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
