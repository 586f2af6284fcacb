"""Distant store: croupier reading the larger-than-memory table from an S3
server with 0 to 100 ms before each request's first byte, against the same
read of local files and its peers on the same server, in one run.

The table is the ``rollout`` workload of ``bench/beyond_memory.py`` (every
column read) in two forms holding the same rows in the same order: a croupier
table (``cr.create_table`` with its defaults) and plain Parquet written by
pyarrow (zstd, row groups of 16,384 rows, 1 MiB pages, no page index). The
local S3-compatible server (``internal/s3serve``: gofakes3 in memory on a
loopback port) holds the Parquet files and the peers' conversions (Lance, MDS)
file by file as they lie on disk, and the croupier table written into it by
``cr.create_table`` from the same rows (a table's versions pin the size, time
and ETag of its files, so a copy would be another table). It waits
``--latencies`` ms before it serves each request, as a distant store delays
the first byte; its control URL sets
the wait before each read and counts the requests and bytes each read made
(reset before, read after). The memory budget is the projected bytes ÷ each
``--ratios`` value, as in ``bench/beyond_memory.py``.

Each reader runs in a fresh process with ``num_workers=0`` and reads from the
start of the epoch for up to ``--seconds`` after its first batch (the whole
epoch when it is done sooner):

- croupier, for each form, budget and order of ``--orders`` (sequential: the
  table's order with ``num_splits=1``; window (a row group a window), clumped
  (clumps of a row group) and full shuffles persisted with
  ``PermutationBuilder.shuffle`` over the local copy and over the store, once
  each, read with ``--num-splits`` streams): on local files, then over the
  server at each latency. Where ``open_table`` takes ``cache_dir`` (croupier's
  local disk cache of the ranges it fetched, also ``CROUPIER_CACHE_DIR``),
  these reads pass ``cache_dir=""`` (no cache), and at each of
  ``--cache-latencies`` two more processes read with a fresh temporary cache
  folder: a first epoch that fills it and a second epoch over the same steps
  (no more batches than the first read) from it; where it does not, those rows
  say "n/a". Every croupier process gets ``CROUPIER_CACHE_DIR`` set to its
  folder or to "" (never a cache of the user's);
- the peers of ``--peers`` on local files and at each latency, with no budget to
  give them: LanceDB's ``StreamingDataset`` (sequential, clumped, full) and
  Lance ``take`` of ``RandomSampler`` batches (full) over the Lance
  conversion, opened as ``s3://`` with ``storage_options`` (endpoint,
  ``allow_http``, ``skip_signature``), and MosaicML ``StreamingDataset``
  (py1e) downloading the MDS shards through boto3 into a fresh local folder of
  its own, then a second epoch over the same steps from that folder at
  ``--cache-latencies``.

Figures: the time from building the reader to its first batch; rows/s from
then to the last batch, and from the first batch on; each over the same read of
local files (the headline); GETs per 1,000 rows delivered (the server's count,
listings included) beside croupier's own ``stats()["requests"]``; bytes fetched
(the server's response bodies; local files: ``rchar``) and croupier's
``stats()["bytes_read"]`` ÷ the Arrow bytes delivered; the most requests the
server served at once; the peak resident memory of the process less its
resident memory once everything is imported (``bench/beyond_memory.py``'s
measure, with its bound for croupier); and the counters of croupier's
``stats()`` whose name holds "cache".

``bench/run.py`` runs this as its ``distant`` part; a narrower matrix than the
default goes to ``bench/RESULTS.md`` only when ``--out`` is given.
"""

from __future__ import annotations

import argparse
import inspect
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import beyond_memory
import loader_throughput
import measure
import readers
import results
import workloads

ORDERS = ("sequential", "window", "clumped", "full")
FORMS = {"croupier": "croupier table", "parquet": "plain Parquet"}
PEERS = ("lancedb", "lance-take", "mosaic")
# What each peer reads, and the name of its folder on the server.
PEER_SOURCES = {"lancedb": "Lance", "lance-take": "Lance", "mosaic": "MDS"}
PEER_FOLDERS = {"lancedb": "lancedb", "lance-take": "lancedb", "mosaic": "mds"}
# The variable croupier's Go runtime reads its cache folder from as it loads.
CACHE_ENV = "CROUPIER_CACHE_DIR"
MiB = beyond_memory.MiB
fmt = loader_throughput.fmt


def cache_missing() -> str | None:
    """Why croupier's disk cache cannot be measured here (``open_table`` takes
    no ``cache_dir``), or None."""
    import croupier as cr

    if "cache_dir" in inspect.signature(cr.open_table).parameters:
        return None
    return "n/a: open_table takes no cache_dir"


@dataclass
class Setup:
    """What every read of the part shares."""

    args: argparse.Namespace
    local: beyond_memory.Tables  # the forms on local files
    remote: beyond_memory.Tables  # the same files on the server
    server: loader_throughput.S3Server
    scratch: Path  # temporary folders: cache folders, MosaicML's shards
    no_cache: str | None  # why croupier has no disk cache to measure, or None

    def folder(self, prefix: str) -> str:
        """A fresh empty folder under :attr:`scratch`."""
        return tempfile.mkdtemp(prefix=prefix, dir=self.scratch)

    def read(
        self,
        spec: readers.Spec,
        latency: float | None,
        *,
        env: dict[str, str] | None = None,
        batches: int | None = None,
    ) -> dict[str, Any]:
        """Measure ``spec`` in a fresh process: on local files (``latency``
        None), or over the server waiting ``latency`` ms before each request,
        with the server's counters of that read."""
        control = None if latency is None else self.server.control
        if control is not None:
            measure.set_server_delay(control, latency or 0)
            measure.reset_server(control)
        res = beyond_memory.run(self.args, spec, control, env=env, batches=batches)
        if control is not None:
            res["server"] = measure.server_stats(control)
        if "note" in res:  # the server's URIs without their query, which is the same in all
            for uri in self.server.uris.values():
                res["note"] = res["note"].replace(uri[uri.find("?") :], "")
            # a read too slow to end in time is a figure of the reader, not a failure
            res["note"] = res["note"].replace("failed: still running", "timed out: still running")
        return res


def second_epoch(
    setup: Setup, spec: readers.Spec, latency: float, first: dict[str, Any], env: dict[str, str]
) -> dict[str, Any]:
    """A second process reading what ``first`` read, from the folder ``spec``
    and ``env`` name, which ``first`` filled."""
    if "note" in first:
        return {"note": "no first epoch"}
    return setup.read(
        spec, latency, env=env, batches=None if first["complete"] else first["batches"]
    )


def croupier_rows(setup: Setup) -> Iterator[dict[str, Any]]:
    """croupier in every form, budget and order: on local files, then over the
    server at each latency, with the cache's epochs where asked."""
    args, local = setup.args, setup.local
    uncached = None if setup.no_cache else ""  # cache_dir of the first-epoch reads
    for form in args.forms:
        for ratio in args.ratios:
            budget = local.budget(ratio)
            for order in args.orders:
                head = {
                    "kind": "croupier",
                    "label": "croupier",
                    "source": FORMS[form],
                    "order": order,
                    "order_label": loader_throughput.ORDER_LABELS[order],
                    "budget": budget,
                    "rows": local.data.rows,
                }
                for latency in [None, *args.latencies]:
                    tables = local if latency is None else setup.remote
                    spec = tables.spec(args, "croupier", order, form, memory_budget=budget)
                    row = {**head, "store": latency, "epoch": "first"}
                    yield row | setup.read(
                        replace(spec, cache_dir=uncached), latency, env={CACHE_ENV: ""}
                    )
                    if latency not in args.cache_latencies:
                        continue
                    if setup.no_cache:
                        yield {**row, "epoch": "fill", "note": setup.no_cache}
                        yield {**row, "epoch": "second", "note": setup.no_cache}
                        continue
                    folder = setup.folder("croupier-cache-")
                    spec, env = replace(spec, cache_dir=folder), {CACHE_ENV: folder}
                    fill = {**row, "epoch": "fill", **setup.read(spec, latency, env=env)}
                    yield fill
                    yield {
                        **row,
                        "epoch": "second",
                        **second_epoch(setup, spec, latency, fill, env),
                    }
                    shutil.rmtree(folder, ignore_errors=True)


def peer_rows(setup: Setup) -> Iterator[dict[str, Any]]:
    """Each peer in each of its orders: on local files, then over the server at
    each latency; MosaicML's second epoch from its folder where asked."""
    args = setup.args
    for kind in args.peers:
        orders = readers.KINDS[kind].orders
        orders = tuple(o for o in orders if o in args.orders or o not in loader_throughput.ORDERS)
        for order in orders:
            head = {
                "kind": kind,
                "label": readers.KINDS[kind].label,
                "source": PEER_SOURCES[kind],
                "order": order,
                "order_label": loader_throughput.ORDER_LABELS[order],
                "budget": None,
                "rows": setup.local.data.rows,
            }
            for latency in [None, *args.latencies]:
                row = {**head, "store": latency, "epoch": "first"}
                if why := readers.missing(readers.KINDS[kind]):
                    yield {**row, "note": f"skipped: {why}"}
                    continue
                spec = setup.local.spec(args, kind, order)
                if latency is not None:
                    spec = replace(spec, peer_uri=setup.server.uris[PEER_FOLDERS[kind]])
                if latency is not None and kind == "mosaic":  # the folder of its shards
                    spec = replace(spec, cache_dir=setup.folder("mosaic-"))
                first = {**row, **setup.read(spec, latency)}
                yield first
                if kind == "mosaic" and latency in args.cache_latencies:
                    yield {
                        **row,
                        "epoch": "second",
                        **second_epoch(setup, spec, latency, first, {}),
                    }
                if spec.cache_dir:
                    shutil.rmtree(spec.cache_dir, ignore_errors=True)


# -- report ----------------------------------------------------------------------


def store_label(latency: float | None) -> str:
    return "local files" if latency is None else f"S3 +{latency:g} ms"


def per_1000(count: int | None, r: dict[str, Any]) -> str:
    """``count`` per 1,000 rows delivered by ``r``."""
    return fmt(count * 1000 / r["samples"] if count is not None else None, ",.1f")


def local_of(rows: list[dict[str, Any]], r: dict[str, Any]) -> dict[str, Any] | None:
    """The first-epoch read of local files that ``r`` read over the server."""
    key = ("kind", "source", "order", "budget")
    return next(
        (
            x
            for x in rows
            if x["store"] is None
            and x["epoch"] == "first"
            and "note" not in x
            and all(x[k] == r[k] for k in key)
        ),
        None,
    )


def ratio(a: float | None, b: float | None) -> str:
    """``a ÷ b``: two decimals, or two significant digits below 0.1."""
    if not (a and b):
        return "—"
    return fmt(a / b, ".2f" if a / b >= 0.1 else ".2g")


def rates(r: dict[str, Any], local: dict[str, Any] | None) -> list[str]:
    """Rows/s with the first batch and from it on, each over the local read's."""
    return [
        fmt(r["samples_per_s"], ",.0f"),
        ratio(r["samples_per_s"], local and local["samples_per_s"]),
        fmt(r["after_first_per_s"] or None, ",.0f"),
        ratio(r["after_first_per_s"], local and local["after_first_per_s"]),
    ]


def fetched(r: dict[str, Any]) -> str:
    """Bytes fetched (the server's, or ``rchar`` of local files) ÷ delivered."""
    got = r["server"]["bytes"] if "server" in r else r["read_bytes"]
    return fmt(got / r["delivered_bytes"], ".2f")


def gets(r: dict[str, Any]) -> str:
    return per_1000(r["server"]["gets"], r) if "server" in r else "—"


def memory(r: dict[str, Any]) -> str:
    """The resident memory over the imports, "(over)" past croupier's bound."""
    cell = fmt(r["over_import"] / MiB, ",.0f")
    if r["budget"] and r["over_import"] > beyond_memory.bound(r["budget"]):
        cell += " (over)"
    return cell


def cache_counters(r: dict[str, Any]) -> str:
    """croupier's counters whose name holds "cache", ``name=value``."""
    found = {k: v for k, v in r.get("stats", {}).items() if "cache" in k}
    return ", ".join(f"`{k}`={v:,}" for k, v in sorted(found.items())) or "—"


def budget_cell(r: dict[str, Any]) -> str:
    return fmt(r["budget"] / MiB if r["budget"] else None, ",.1f")


# The figures of a read; croupier's own counters only in its rows.
COLUMNS = [
    "first batch (ms)",
    "rows/s",
    "÷ local",
    "rows/s from the first batch on",
    "÷ local",
    "GETs / 1,000 rows",
    "croupier requests / 1,000 rows",
    "fetched ÷ delivered",
    "croupier bytes_read ÷ delivered",
    "most requests at once",
    "RSS over imports (MiB)",
    "epoch read",
]
CROUPIER_ONLY = ("croupier requests / 1,000 rows", "croupier bytes_read ÷ delivered")


def columns(croupier: bool) -> list[str]:
    """The figure columns of croupier's reads, or of a peer's."""
    return [c for c in COLUMNS if croupier or c not in CROUPIER_ONLY]


def read_cells(r: dict[str, Any], rows: list[dict[str, Any]], croupier: bool) -> list[str]:
    """The figures of one read, in :func:`columns` order."""
    st = r.get("stats", {})
    cells = {
        "first batch (ms)": fmt(r["first_batch_s"] * 1e3, ",.0f"),
        "GETs / 1,000 rows": gets(r),
        "croupier requests / 1,000 rows": per_1000(st.get("requests"), r),
        "fetched ÷ delivered": fetched(r),
        "croupier bytes_read ÷ delivered": fmt(
            st["bytes_read"] / r["delivered_bytes"] if "bytes_read" in st else None, ".2f"
        ),
        "most requests at once": fmt(r["server"]["peak_in_flight"] if "server" in r else None, ","),
        "RSS over imports (MiB)": memory(r),
        "epoch read": f"{r['samples'] / r['rows']:.0%}",
    }
    rate = rates(r, local_of(rows, r))
    out = [cells["first batch (ms)"], *rate]
    return out + [cells[c] for c in columns(croupier)[1 + len(rate) :]]


def table(head: list[str], lines: list[list[str]], right: int) -> list[str]:
    """A markdown table whose last ``right`` columns are figures."""
    left = len(head) - right
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * left + "---:|" * right,
        *("| " + " | ".join(cells) + " |" for cells in lines),
    ]


def note_row(r: dict[str, Any], width: int, notes: list[str]) -> list[str]:
    """``width`` cells of a read without figures: its note, then blanks."""
    return [beyond_memory.note_cell(r["note"], notes)] + [""] * (width - 1)


def reads_lines(rows: list[dict[str, Any]], croupier: bool) -> list[str]:
    """Every first-epoch read of croupier, or every read of a peer, and the
    long notes of its rows."""
    notes: list[str] = []
    cols = columns(croupier)
    out = []
    for r in rows:
        if (r["kind"] == "croupier") != croupier or (croupier and r["epoch"] != "first"):
            continue
        if croupier:
            head = [r["source"], r["order_label"], budget_cell(r), store_label(r["store"])]
        else:
            head = [r["label"], r["source"], r["order_label"], store_label(r["store"]), r["epoch"]]
        cells = note_row(r, len(cols), notes) if "note" in r else read_cells(r, rows, croupier)
        out.append(head + cells)
    if croupier:
        head = ["table", "order", "budget (MiB)", "store"]
    else:
        head = ["reader", "table", "order", "store", "epoch"]
    return table([*head, *cols], out, len(cols)) + beyond_memory.notes_lines(notes)


def headline_lines(
    rows: list[dict[str, Any]], latencies: list[float], after_first: bool
) -> list[str]:
    """Per form, order and budget: croupier's rate over the server at each
    latency ÷ its rate on local files, with the first batch or from it on."""
    key = "after_first_per_s" if after_first else "samples_per_s"
    cells: dict[tuple[str, str, int], dict[float, str]] = {}
    for r in rows:
        if r["kind"] != "croupier" or r["epoch"] != "first" or r["store"] is None:
            continue
        local = local_of(rows, r)
        at = cells.setdefault((r["source"], r["order_label"], r["budget"]), {})
        at[r["store"]] = "—" if "note" in r else ratio(r[key], local and local[key])
    lines = [
        [source, order, fmt(budget / MiB, ",.1f"), *(at.get(lat, "—") for lat in latencies)]
        for (source, order, budget), at in cells.items()
    ]
    head = ["table", "order", "budget (MiB)", *(f"+{lat:g} ms" for lat in latencies)]
    return table(head, lines, len(latencies) + 1)


CACHE_COLUMNS = [
    "store",
    "filling: rows/s",
    "÷ local",
    "GETs / 1,000 rows",
    "second epoch: first batch (ms)",
    "rows/s",
    "÷ local",
    "rows/s from the first batch on ÷ local",
    "GETs / 1,000 rows",
    "fetched ÷ delivered",
    "RSS over imports (MiB)",
    "cache counters (second epoch)",
]


def cache_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Per croupier read over the server with the cache: the epoch filling it
    and the second epoch from it."""
    notes: list[str] = []
    out = []
    fills = [r for r in rows if r["kind"] == "croupier" and r["epoch"] == "fill"]
    seconds = [r for r in rows if r["kind"] == "croupier" and r["epoch"] == "second"]
    for fill, second in zip(fills, seconds, strict=True):
        head = [fill["source"], fill["order_label"], budget_cell(fill), store_label(fill["store"])]
        local = local_of(rows, fill)
        if "note" in fill:
            out.append(head + note_row(fill, len(CACHE_COLUMNS) - 1, notes))
            continue
        cells = [
            fmt(fill["samples_per_s"], ",.0f"),
            ratio(fill["samples_per_s"], local and local["samples_per_s"]),
            gets(fill),
        ]
        if "note" in second:
            cells += note_row(second, len(CACHE_COLUMNS) - 4, notes)
        else:
            cells += [
                fmt(second["first_batch_s"] * 1e3, ",.0f"),
                fmt(second["samples_per_s"], ",.0f"),
                ratio(second["samples_per_s"], local and local["samples_per_s"]),
                ratio(second["after_first_per_s"], local and local["after_first_per_s"]),
                gets(second),
                fetched(second),
                memory(second),
                cache_counters(second),
            ]
        out.append(head + cells)
    head = ["table", "order", "budget (MiB)", *CACHE_COLUMNS]
    return table(head, out, len(CACHE_COLUMNS) - 1) + beyond_memory.notes_lines(notes)


def setup_lines(args: argparse.Namespace, setup: Setup, load: tuple[float, float]) -> list[str]:
    """The setup paragraphs of the section."""
    tables = setup.local
    budgets = ", ".join(
        f"{tables.budget(r) / MiB:,.1f} MiB (the table is {r} times it)" for r in args.ratios
    )
    lat = ", ".join(f"{x:g}" for x in args.latencies)
    cache_lat = ", ".join(f"{x:g}" for x in args.cache_latencies)
    lines = [
        f"Generated by `{args.command}`, run on {results.machine(load)}",
        "",
        "Versions: "
        + results.versions(
            ["torch", "pyarrow", "pylance", "lancedb", "mosaicml-streaming", "boto3"]
        )
        + ".",
        "",
        beyond_memory.data_text(tables)
        + " Read here: the "
        + " and the ".join(FORMS[f] for f in args.forms)
        + ". The store: the local S3-compatible server (`internal/s3test`, gofakes3 in memory,"
        " run by `internal/s3serve` on a loopback port, on the same CPUs as the reader) holding"
        " the Parquet files, the Lance conversion (default `lance.write_dataset` settings) and"
        " the MDS conversion (uncompressed, default shard size) as they lie on disk, and the"
        " croupier table written into it by `cr.create_table` from the same rows; it waits"
        f" {lat} ms before it serves each request, as a distant store delays the first byte.",
        "",
        f"Memory budgets (`StreamingDataset(memory_budget=…)`, other settings default): {budgets}.",
        "",
        "Method: each reader runs in a fresh process with `num_workers=0` and reads from the"
        f' start of the epoch for up to {args.seconds:g} s after its first batch ("epoch read"'
        " says how much; a process still running after"
        f' {args.timeout:g} s is killed). "first batch" is the time from building the reader'
        " (opening the table over the store included) to its first batch; rows/s counts every"
        ' batch from building the reader to its last, "from the first batch on" the batches'
        ' after it over the time after it. "÷ local" divides by the same read of local files in'
        ' the same run. "GETs" are the server\'s count of GET requests during the read'
        " (listings included; its counters are reset before each read and read after), beside"
        ' croupier\'s own `stats()["requests"]`; "fetched ÷ delivered" is the response bytes'
        " the server sent (local files: `rchar` of `/proc/<pid>/io`) over the Arrow bytes of"
        ' the projected columns delivered, beside `stats()["bytes_read"]` over the same; "most'
        ' requests at once" is the most the server served at once. "RSS over imports" is'
        ' measured as in the Larger than memory section; "(over)" marks a croupier read past'
        " 1.25 times the budget + 64 MiB. croupier processes get `CROUPIER_CACHE_DIR` set to"
        ' "" or to a fresh temporary folder, never a cache of the user\'s.',
        "",
        beyond_memory.order_text(args, tables, args.forms)
        + " Each is built once over the local copy and once over the store (before the reads,"
        " with no wait). Peers read with `num_workers=0` and no budget to give them, on local"
        " files and over the server: LanceDB's `StreamingDataset` over the Lance conversion"
        f" opened as `s3://` with `storage_options` (endpoint, `allow_http`, `skip_signature`),"
        f" `num_splits={args.num_splits}`, unshuffled (sequential), `shuffle=True` and"
        f" `shuffle_clump_size={tables.clumps['croupier']:,}` (clumped) or none (full); Lance"
        " `take` of `RandomSampler` batches over that dataset; MosaicML `StreamingDataset`"
        " with `shuffle=True` (py1e) downloading the shards through boto3 (`S3_ENDPOINT_URL`)"
        " into a fresh local folder of its own, signing with placeholder keys (MosaicML 0.13"
        " turns to unsigned requests only when creating its client fails, and botocore reports"
        " missing credentials at the first request instead; the server checks no signature).",
    ]
    if not args.cache_latencies:
        return lines
    return [
        *lines,
        "",
        "Disk cache: at S3 +" + cache_lat + " ms each croupier read also runs twice with"
        " `open_table(uri, cache_dir=<fresh temporary folder>)` and `CROUPIER_CACHE_DIR` set to"
        " it: a first epoch that fills the folder, then, in a second process, a second epoch"
        " from it over the same steps (no more batches than the first read), whose GETs"
        " should be only those of ranges the first did not fetch; the first-epoch reads above"
        ' pass `cache_dir=""`. MosaicML reads a second epoch from its own shard folder the same'
        " way." + (f" Here croupier's rows say {setup.no_cache}." if setup.no_cache else ""),
    ]


def report(rows: list[dict[str, Any]], setup: Setup, load: tuple[float, float]) -> list[str]:
    """The section: setup, the headline, every read, the cache's epochs, the peers."""
    args = setup.args
    lines = setup_lines(args, setup, load)
    lines += [
        "",
        "### croupier over the store ÷ on local files",
        "",
        "rows/s from the first batch on over the server at each wait ÷ the same read of local"
        " files:",
        "",
        *headline_lines(rows, args.latencies, after_first=True),
        "",
        "With the first batch (opening the table over the store included):",
        "",
        *headline_lines(rows, args.latencies, after_first=False),
        "",
        "### Every croupier read",
        "",
        *reads_lines(rows, croupier=True),
    ]
    if args.cache_latencies:
        lines += ["", "### A second epoch from croupier's disk cache", "", *cache_lines(rows)]
    if args.peers:
        lines += ["", "### Peers on the same server", "", *reads_lines(rows, croupier=False)]
    return lines


# -- main --------------------------------------------------------------------------


def floats(s: str) -> list[float]:
    return [float(x) for x in beyond_memory.csv(s)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    beyond_memory.common_args(ap, seconds=3.0, timeout=60.0)
    ap.add_argument(
        "--latencies",
        type=floats,
        default=[0.0, 20.0, 50.0, 100.0],
        help="ms the server waits before each request's first byte, one read each",
    )
    ap.add_argument(
        "--cache-latencies",
        type=floats,
        default=[100.0],
        help="of --latencies: where the cache's two epochs (and MosaicML's second) run",
    )
    ap.add_argument(
        "--ratios",
        type=lambda s: [int(x) for x in beyond_memory.csv(s)],
        default=[4, 32],
        help="projected bytes ÷ memory budget, one run of croupier each",
    )
    ap.add_argument(
        "--orders", type=beyond_memory.csv, default=list(ORDERS), help="of: " + ", ".join(ORDERS)
    )
    ap.add_argument(
        "--forms", type=beyond_memory.csv, default=list(FORMS), help="of: " + ", ".join(FORMS)
    )
    ap.add_argument(
        "--peers", type=beyond_memory.csv, default=list(PEERS), help="of: " + ", ".join(PEERS)
    )
    # A part of the matrix goes to bench/RESULTS.md only when asked (--out):
    # it would replace the whole section there.
    results_md = ap.get_default("out")
    ap.set_defaults(out=None)
    args = ap.parse_args(argv)
    beyond_memory.check_choices(ap, args, ORDERS, FORMS, PEERS)
    if extra := set(args.cache_latencies) - set(args.latencies):
        ap.error(f"--cache-latencies {sorted(extra)} are not among --latencies")
    matrix = ("latencies", "cache_latencies", "ratios", "orders", "forms", "peers", "rows")
    if args.out is None and all(getattr(args, n) == ap.get_default(n) for n in matrix):
        args.out = results_md
    return args


def progress(r: dict[str, Any]) -> str:
    """One line about a finished read."""
    budget = f"{r['budget'] / MiB:6,.1f} MiB" if r["budget"] else " " * 10
    head = (
        f"{r['label'][:28]:28s} {r['source']:15s} {r['order_label']:16s} {budget}"
        f" {store_label(r['store']):12s} {r['epoch']:6s}"
    )
    if "note" in r:
        return f"{head} {r['note']}"
    cache = cache_counters(r)
    return (
        f"{head} first batch {r['first_batch_s'] * 1e3:7,.0f} ms {r['samples_per_s']:8,.0f}"
        f" rows/s ({fmt(r['after_first_per_s'] or None, ',.0f')} after)  GETs/1k {gets(r)}"
        f"  fetched/delivered {fetched(r)}"
        + (f"  {cache}" if cache != "—" else "")
        + f"  ({r['wall_s']:.0f} s)"
    )


def start(args: argparse.Namespace, scratch: Path) -> Setup:
    """Write (or find in the cache) every form and conversion the reads need,
    load them into the server and build the permutations over it."""
    peers = [k for k in args.peers if not readers.missing(readers.KINDS[k])]
    local = beyond_memory.prepare(
        args, lance=bool({"lancedb", "lance-take"} & set(peers)), layouts=["croupier"]
    )
    # The croupier table is written to the server, not copied: its versions
    # pin the size, time and ETag of each of its files.
    (scratch / "empty").mkdir()
    folders = {"croupier": scratch / "empty"}
    if "parquet" in args.forms:
        folders["parquet"] = local.data.parquet
    if {"lancedb", "lance-take"} & set(peers):
        folders["lancedb"] = local.data.lancedb
    if "mosaic" in peers:
        folders["mds"] = workloads.to_mds(local.data)
    server = loader_throughput.S3Server.start(args.cache / "bin", folders)
    try:
        if "croupier" in args.forms:
            workloads.write_croupier(local.data, server.uris["croupier"])
        remote = local.elsewhere(args, {f: server.uris[f] for f in args.forms}, scratch / "perms")
    except BaseException:
        server.close()
        raise
    return Setup(args, local, remote, server, scratch, cache_missing())


def main(argv: list[str] | None = None) -> int:
    """Run the part; returns 1 when a reader failed, else 0."""
    args = parse_args(argv)
    load = os.getloadavg()[0]
    began = time.perf_counter()
    out: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="croupier-distant-") as tmp:
        setup = start(args, Path(tmp))
        try:
            for rows in (croupier_rows(setup), peer_rows(setup)):
                for r in rows:
                    out.append(r)
                    print(progress(r), flush=True)
        finally:
            setup.server.close()
    lines = report(out, setup, (load, os.getloadavg()[0]))
    print(f"{len(out)} reads in {time.perf_counter() - began:,.0f} s")
    if args.out is None:
        print("\n".join(lines))
        print("a part of the matrix: not written to bench/RESULTS.md (give --out to write it)")
    else:
        results.update_section(args.out, "Distant store", lines)
        print(f"wrote the Distant store section of {args.out}")
    return 1 if any(r.get("note", "").startswith("failed") for r in out) else 0


if __name__ == "__main__":
    sys.exit(main())
