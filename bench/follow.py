"""Following a growing croupier table against reading a pinned version of it.

A croupier table of ``--rows`` rollouts (``id``, a ``tokens`` list of 16 to 112
int32 values, ``reward``) is written as ``--versions`` appends of equal size.
Its rows are then read once, in torch format with the token lists packed,
``--global-batch-size`` rows a step, two ways, in turn ``--repeats`` times:

- pinned: a ``StreamingDataset`` over a shuffled permutation of the latest
  version (the permutation's build is not timed);
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

import numpy as np
import pyarrow as pa
import results

BENCH = Path(__file__).resolve().parent
WAIT = 0.5  # seconds of waiting that ends the following read; not timed


def rollouts(start: int, n: int, rng: np.random.Generator) -> pa.Table:
    """Rows ``start .. start+n``."""
    ids = np.arange(start, start + n, dtype=np.int64)
    lengths = rng.integers(16, 113, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    tokens = pa.ListArray.from_arrays(
        pa.array(offsets), pa.array(rng.integers(0, 50_000, offsets[-1], dtype=np.int32))
    )
    return pa.table({"id": ids, "tokens": tokens, "reward": rng.random(n).astype(np.float32)})


def read(ds: Any, steps: int | None = None) -> tuple[int, float]:
    """Rows of one pass over ``ds`` (or its first ``steps``) and the seconds it took,
    less the wait that ended it."""
    import croupier as cr

    rows, start, last = 0, time.perf_counter(), time.perf_counter()
    for n, batch in enumerate(ds, 1):
        rows += len(batch["id"])
        last = time.perf_counter()
        if n == steps:
            break
    if isinstance(ds, cr.FollowingDataset):
        assert ds.stats()["waited_out"]
    return rows, last - start


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
    ap.add_argument("--out", type=Path, default=BENCH / "RESULTS.md")
    ap.add_argument("--command", default="python bench/follow.py")
    args = ap.parse_args(argv)

    import croupier as cr

    load = os.getloadavg()[0]
    g = args.global_batch_size
    with tempfile.TemporaryDirectory() as tmp:
        uri = "file://" + str(Path(tmp) / "rollouts")
        rng = np.random.default_rng(1)
        per = args.rows // args.versions
        table = cr.create_table(uri, rollouts(0, per, rng))
        for v in range(1, args.versions):
            table.append(rollouts(v * per, per, rng))
        latest = cr.open_table(uri)
        perm = cr.PermutationBuilder(latest).shuffle(seed=1).persist(uri + "-perm", progress=False)
        best: dict[str, tuple[int, float]] = {}
        for _ in range(args.repeats):
            pinned = cr.StreamingDataset(perm["all"], global_batch_size=g, shuffle_seed=1)
            follow = cr.Follow(rows_per_round=args.rows_per_round, wait_timeout=WAIT)
            following = cr.FollowingDataset(uri, follow, global_batch_size=g, shuffle_seed=1)
            for name, ds in (("pinned", pinned), ("following", following)):
                rows, seconds = read(ds)
                if name not in best or seconds < best[name][1]:
                    best[name] = (rows, seconds)
                ds.close()
        lat = {poll: sorted(latencies(uri, args, poll)) for poll in (0.02, 0.2)}

    def pct(xs: list[float], q: float) -> float:
        return 1e3 * xs[min(int(q * len(xs)), len(xs) - 1)]

    lines = [
        f"Generated by `{args.command}` (`bench/follow.py`), run on"
        f" {results.machine((load, os.getloadavg()[0]))}",
        f"Versions: {results.versions([])}.",
        "",
        f"{args.rows:,} rows (`id`, `tokens`: 16 to 112 int32 values, `reward`) written as"
        f" {args.versions} appends of {per:,} rows to a croupier table on local files, read once"
        f" in torch format, tokens packed, {g} rows a step, two ways, in turn {args.repeats}"
        " times (figures: the fastest): pinned, a `StreamingDataset` over a shuffled"
        " permutation of the latest version; following, a `FollowingDataset` from version 1"
        f" in rounds of {args.rows_per_round:,} rows (the wait after its last round is not"
        " timed).",
        "",
        "| read | rows | seconds | rows/s |",
        "|---|---:|---:|---:|",
    ]
    for name, (rows, seconds) in best.items():
        lines.append(f"| {name} | {rows:,} | {seconds:.2f} | {rows / seconds:,.0f} |")
    ratio = (best["following"][0] / best["following"][1]) / (best["pinned"][0] / best["pinned"][1])
    lines += [
        "",
        f"Following ÷ pinned, rows/s: {ratio:.2f}. A round shuffles the rows of its own"
        " versions only, so its steps read fewer data files than the pinned read's, which"
        " shuffles every row; each round opens a stream of its own. Following"
        " deals the rows of full steps only: those left past the last round's last step wait"
        " for a next round.",
        "",
        f"Commit to first dealt: {args.commits} appends of one step's rows, one every"
        f" {args.gap:g} s, each a round of its own; milliseconds from `Table.append` returning"
        " to the step reaching the loop:",
        "",
        "| poll interval | p50 (ms) | p90 (ms) | max (ms) |",
        "|---|---:|---:|---:|",
    ]
    for poll, xs in lat.items():
        p50, p90, most = pct(xs, 0.5), pct(xs, 0.9), 1e3 * xs[-1]
        lines.append(f"| {poll * 1e3:.0f} ms | {p50:.1f} | {p90:.1f} | {most:.1f} |")
    print("\n".join(lines))
    results.update_section(args.out, "Following a growing table", lines)
    print(f"wrote the Following a growing table section of {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
