"""Ranks: a cluster of croupier ranks, each a process of its own, reading the
larger-than-memory table of ``bench/beyond_memory.py`` together.

For each shuffled order (window, clumped with clumps aligned to row groups,
full; page-aligned clumps, ``clump_size="auto"``, and power-of-two clumps of
``--pow2-clump`` rows when asked for), each world size W of ``--worlds`` and
each ``--workers`` count K, W
processes each build ``cr.StreamingDataset(rank=r, world_size=W)`` over the
same persisted permutation, with a memory budget the projected columns are
``--ratio`` times, and read it through ``cr.DataLoader(ds, num_workers=K)``,
which reads in the rank's process, or, for a count written ``Kp``, through
``cr.DataLoader(ds, num_workers=K, in_process=False)``, which starts K worker
processes.
The processes import everything first and then start together; each reads
for up to ``--seconds`` after its own first batch.

Figures, for the cluster: rows/s of all ranks together from the start to the
last batch of any rank, and from the first batch of any rank on; bytes read
(``rchar`` of every rank and its workers) ÷ Arrow bytes delivered, summed over
the ranks; the ratio to a sequential pyarrow scan measured in the same run;
and, per order and world size, the rate after the first batch with 2 workers
(asked for, and as processes) ÷ the rate with none.

``bench/run.py`` runs this as its ``ranks`` part.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import beyond_memory
import loader_throughput
import measure
import results

ORDERS = ("window", "clumped", "full")
# Orders measured when asked for (--orders): page-aligned clumps
# (clump_size="auto") and the power-of-two clumps (--pow2-clump) that
# clump_size="auto" chose before clumps followed pages.
MORE_ORDERS = ("auto", "pow2")
fmt = loader_throughput.fmt


def workers_asked(workers: str) -> tuple[int, bool | None]:
    """``num_workers`` and ``in_process`` of a ``--workers`` entry: ``K``, or
    ``Kp`` for K worker processes."""
    return int(workers.removesuffix("p")), False if workers.endswith("p") else None


def workers_label(workers: str) -> str:
    """A ``--workers`` entry as the tables say it."""
    n, in_process = workers_asked(workers)
    return f"{n} (processes)" if in_process is False else str(n)


def run_cluster(
    args: argparse.Namespace, tables: beyond_memory.Tables, order: str, world: int, workers: str
) -> dict[str, Any]:
    """Measure ``world`` ranks of ``workers`` workers each (see workers_asked)
    in ``order``, started together; their figures summed, or a note why there
    are none."""
    num_workers, in_process = workers_asked(workers)
    specs = [
        tables.spec(
            args,
            "croupier",
            order,
            args.form,
            memory_budget=tables.budget(args.ratio),
            rank=r,
            world_size=world,
            workers=num_workers,
            in_process=in_process,
        )
        for r in range(world)
    ]
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix="croupier-ranks-") as start,
        ThreadPoolExecutor(world) as pool,
    ):
        futures = [
            pool.submit(
                loader_throughput.run_child,
                spec,
                args.seconds,
                None,
                timeout=args.timeout,
                resume=False,
                import_rss=True,
                barrier=start,
                name=str(spec.rank),
            )
            for spec in specs
        ]
        # a rank that failed before the start line must not hold the others there
        while measure.ready_count(start) < world and not any(f.done() for f in futures):
            time.sleep(0.05)
        measure.give_start(start)
        ranks = [f.result() for f in futures]
    res: dict[str, Any] = {"wall_s": time.perf_counter() - started}
    if failed := [r["error"] for r in ranks if "error" in r]:
        return {**res, "note": beyond_memory.failure(failed[0])}
    if not all(r["samples"] for r in ranks):
        return {**res, "note": "a rank delivered no batch"}
    begin = min(r["started"] for r in ranks)
    firsts = [r["started"] + r["first_batch_s"] for r in ranks]
    end = max(f + r["seconds"] for f, r in zip(firsts, ranks, strict=True))
    after_first = sum(r["after_first_per_s"] * r["seconds"] for r in ranks)
    return {
        **res,
        "samples": sum(r["samples"] for r in ranks),
        "samples_per_s": sum(r["samples"] for r in ranks) / (end - begin),
        "after_first_per_s": after_first / (end - min(firsts)) if end > min(firsts) else None,
        "read_bytes": sum(r["read_bytes"] for r in ranks),
        "delivered_bytes": sum(r["delivered_bytes"] for r in ranks),
        "first_batch_s": max(r["first_batch_s"] for r in ranks),
    }


# -- report ----------------------------------------------------------------------


def table_lines(rows: list[dict[str, Any]], base: float | None, total: int) -> list[str]:
    """The markdown table of every cluster, and the long notes of its rows."""
    notes: list[str] = []
    lines = [
        "| order | ranks | workers per rank | rows/s | vs baseline | rows/s from the first"
        " batch on | read ÷ delivered | first batch, slowest rank (ms) | epoch read |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        head = f"| {r['order_label']} | {r['world']} | {workers_label(r['workers'])} |"
        if "note" in r:
            lines.append(head + f" {beyond_memory.note_cell(r['note'], notes)} |" + " |" * 5)
            continue
        cells = [
            fmt(r["samples_per_s"], ",.0f"),
            fmt(r["samples_per_s"] / base if base else None, ".2f"),
            fmt(r["after_first_per_s"], ",.0f"),
            fmt(r["read_bytes"] / r["delivered_bytes"], ".2f"),
            fmt(r["first_batch_s"] * 1e3, ",.0f"),
            f"{r['samples'] / total:.0%}",
        ]
        lines.append(head + "".join(f" {c} |" for c in cells))
    return lines + beyond_memory.notes_lines(notes)


def workers_lines(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    """Per order, worker count other than 0 and world size: the rate from the
    first batch on with those workers per rank ÷ the rate with none."""
    rate = {
        (r["order"], r["world"], r["workers"]): r.get("after_first_per_s")
        for r in rows
        if "note" not in r
    }
    lines = [
        "| order | workers per rank | "
        + " | ".join(f"{w} {'rank' if w == 1 else 'ranks'}" for w in args.worlds)
        + " |",
        "|---|---|" + "---:|" * len(args.worlds),
    ]
    for order in args.orders:
        for workers in args.workers:
            if workers == "0":
                continue
            ratios = []
            for w in args.worlds:
                some, none = rate.get((order, w, workers)), rate.get((order, w, "0"))
                ratios.append(fmt(some / none if some and none else None, ".2f"))
            label = f"{loader_throughput.ORDER_LABELS[order]} | {workers_label(workers)}"
            lines.append(f"| {label} | " + " | ".join(ratios) + " |")
    return lines


def setup_lines(
    args: argparse.Namespace,
    tables: beyond_memory.Tables,
    base: dict[str, Any],
    load: tuple[float, float],
) -> list[str]:
    """The setup paragraphs of the section."""
    return [
        f"Generated by `{args.command}`, run on {results.machine(load)}",
        "",
        "Versions: " + results.versions(["torch", "pyarrow"]) + ".",
        "",
        beyond_memory.data_text(tables) + f" Read here: the {beyond_memory.FORMS[args.form]}.",
        "",
        "Method: for each order, world size W and number of DataLoader workers K, W processes"
        f" each read rank r of W: `cr.StreamingDataset(permutation, global_batch_size="
        f"{tables.data.workload.batch}, num_splits={args.num_splits}, rank=r, world_size=W,"
        f" memory_budget={tables.budget(args.ratio) / beyond_memory.MiB:,.1f} MiB)` (the"
        f" projected columns are {args.ratio} times the budget) through `cr.DataLoader(ds,"
        " num_workers=K)` with its defaults, which read in the rank's process (workers would"
        " run no code of the user's), or, for K worker processes, through `cr.DataLoader(ds,"
        " num_workers=K, in_process=False)`, whose workers each get a K-th of the budget and"
        " are forked from a fork server each rank starts (importing torch once)."
        " The processes import torch and croupier first, then start together; each reads from"
        f" the start of the epoch for up to {args.seconds:g} s after its own first batch. rows/s"
        " is the rows all ranks delivered over the time from the start to the last batch of"
        ' any rank; "from the first batch on" counts the rows after each rank\'s first batch'
        ' over the time from the first batch of any rank to the last. "read ÷ delivered" is'
        " the `rchar` of every rank and its workers (less the workers' start-up) over the"
        " Arrow bytes of the projected columns delivered, both summed over the ranks. The"
        f" baseline, a pyarrow `iter_batches` scan of the plain Parquet files in one process,"
        f" read {fmt(base.get('samples_per_s'), ',.0f')} rows/s in the same run (the faster of"
        " a scan before the clusters and one after).",
        "",
        beyond_memory.order_text(args, tables, [args.form]),
    ]


# -- main --------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    beyond_memory.common_args(ap, seconds=3.0, timeout=240.0)

    def ints(s: str) -> list[int]:
        return [int(x) for x in beyond_memory.csv(s)]

    ap.add_argument("--worlds", type=ints, default=[1, 4, 8], help="world sizes")
    ap.add_argument(
        "--workers",
        type=beyond_memory.csv,
        default=["0", "2", "2p"],
        help="DataLoader workers per rank: K (as asked for), or Kp (K worker processes)",
    )
    ap.add_argument(
        "--orders",
        type=beyond_memory.csv,
        default=list(ORDERS),
        help="of: " + ", ".join(ORDERS + MORE_ORDERS),
    )
    ap.add_argument("--pow2-clump", type=int, default=0, help="rows per clump of the pow2 order")
    ap.add_argument("--ratio", type=int, default=4, help="projected bytes ÷ memory budget")
    ap.add_argument("--form", choices=list(beyond_memory.FORMS), default="croupier")
    # A part of the matrix goes to bench/RESULTS.md only when asked (--out):
    # it would replace the whole section there.
    results_md = ap.get_default("out")
    ap.set_defaults(out=None)
    args = ap.parse_args(argv)
    full = (args.worlds, args.workers, args.orders) == tuple(
        ap.get_default(name) for name in ("worlds", "workers", "orders")
    )
    if args.out is None and full:
        args.out = results_md
    if unknown := set(args.orders) - set(ORDERS + MORE_ORDERS):
        ap.error(f"unknown orders: {', '.join(sorted(unknown))}")
    if "pow2" in args.orders and args.pow2_clump <= 0:
        ap.error("the pow2 order needs --pow2-clump")
    if bad := [w for w in args.workers if not w.removesuffix("p").isdigit()]:
        ap.error(f"--workers: {', '.join(bad)} is not a count, or a count and p")
    if bad := [w for w in args.worlds if args.num_splits % w]:
        ap.error(f"world sizes {bad} do not divide --num-splits {args.num_splits}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the part; returns 1 when a cluster failed, else 0."""
    args = parse_args(argv)
    load = os.getloadavg()[0]
    tables = beyond_memory.prepare(args, lance=False)
    scan = tables.spec(args, "pyarrow", "sequential")
    first = beyond_memory.run(args, scan)
    print(f"baseline: {fmt(first.get('samples_per_s'), ',.0f')} rows/s", flush=True)
    out = []
    for order in args.orders:
        for world in args.worlds:
            for workers in args.workers:
                res = {
                    "order": order,
                    "order_label": loader_throughput.ORDER_LABELS[order],
                    "world": world,
                    "workers": workers,
                    **run_cluster(args, tables, order, world, workers),
                }
                out.append(res)
                about = res.get("note") or (
                    f"{res['samples_per_s']:9,.0f} rows/s  read/delivered"
                    f" {res['read_bytes'] / res['delivered_bytes']:6.2f}"
                )
                label = f"{world} ranks, {workers_label(workers)} workers"
                print(
                    f"{res['order_label']:16s} {label}  {about}  ({res['wall_s']:.0f} s)",
                    flush=True,
                )
    last = beyond_memory.run(args, scan)
    print(f"baseline again: {fmt(last.get('samples_per_s'), ',.0f')} rows/s", flush=True)
    # The faster scan: a single one of a few seconds varies by a third on a
    # shared machine.
    base = max(first, last, key=lambda r: r.get("samples_per_s", 0))
    lines = setup_lines(args, tables, base, (load, os.getloadavg()[0]))
    lines += ["", *table_lines(out, base.get("samples_per_s"), tables.data.rows)]
    if "0" in args.workers and len(args.workers) > 1:
        lines += [
            "",
            "Rate from the first batch on with DataLoader workers per rank ÷ the rate with"
            " none, same order and world size:",
            "",
            *workers_lines(out, args),
        ]
    if args.out is None:
        print("\n".join(lines))
        print("a part of the matrix: not written to bench/RESULTS.md (give --out to write it)")
    else:
        results.update_section(args.out, "Ranks", lines)
        print(f"wrote the Ranks section of {args.out}")
    failed = "note" in base or any(r.get("note", "").startswith("failed") for r in out)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
