"""Larger than memory: croupier reading a table 4 and 32 times its memory
budget, against a sequential pyarrow scan and its peers, in one run.

The table is the ``rollout`` workload of ``bench/workloads.py`` (id, 128-640
token ids, their log-probs and a reward a row; every column is read) in four
forms holding the same rows in the same order: plain Parquet written by
pyarrow (zstd, row groups of 16,384 rows, 1 MiB pages, no page index), a
croupier table written by ``cr.create_table`` with its defaults (16 KiB
lz4 pages), one written in 4 KiB pages (``page_bytes=4096``), the layout for
full shuffles of tables far larger than the budget, and one in zstd pages
(``compression="zstd"``), the smallest files. The memory
budget is scaled down rather than the data up: ``memory_budget`` is the
projected bytes ÷ each ``--ratios`` value, so the part runs in minutes while
the table is still many budgets large. The files sit in the page cache; what
is short is the memory the reader may hold, not the disk.

Each reader runs in a fresh process with ``num_workers=0`` and reads from the
start of the epoch for up to ``--seconds`` after its first batch (the whole
epoch when it is done sooner):

- the baseline, a pyarrow ``iter_batches`` scan of the plain Parquet files in
  stored order → torch, first and again last: the faster of the two is the
  denominator of every ratio (a single scan of a few seconds varied by a
  third from run to run on a shared machine);
- croupier in each form and each order (sequential: the table's order with
  ``num_splits=1``; window (a row group a window, and ``--small-window``
  rows), clumped and full shuffles persisted with ``PermutationBuilder.shuffle``
  and read with ``--num-splits`` streams), with each budget;
- the peers on the same rows, with no budget to give them: LanceDB's
  ``StreamingDataset`` shuffled (clumped and full) over a Lance conversion,
  Lance ``take`` of ``RandomSampler`` batches, and the map-style torch
  ``Dataset`` over a pyarrow table holding the projected columns.

Figures: rows/s from building the reader to its last batch, the ratio to the
baseline, bytes read ÷ Arrow bytes delivered (``rchar`` of the process),
croupier's own decoded bytes ÷ delivered (``stats()``), and the peak resident
memory of the process less its resident memory once everything is imported,
next to the bound croupier must keep: 1.25 times the budget + 64 MiB.

``bench/run.py`` runs this as its ``memory`` part; ``bench/ranks.py`` reads
the same table with several ranks.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import loader_throughput
import pyarrow.parquet as pq
import readers
import results
import workloads

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = "rollout"
ORDERS = ("sequential", "window", "window-small", "clumped", "full")
PEERS = ("lancedb", "lance-take", "torch-map")
FORMS = {
    "parquet": "plain Parquet",
    "croupier": "croupier table",
    "croupier-4k": "croupier table, 4 KiB pages",
    "croupier-zstd": "croupier table, zstd",
}
# How each croupier form is written: create_table's page_bytes and compression.
LAYOUTS: dict[str, tuple[int | None, str | None]] = {
    "croupier": (None, None),
    "croupier-4k": (4 << 10, None),
    "croupier-zstd": (None, "zstd"),
}
# What each peer reads, for the "table" column.
PEER_SOURCES = {
    "pyarrow": "plain Parquet",
    "torch-map": "plain Parquet, in memory",
    "lancedb": "Lance",
    "lance-take": "Lance",
}
MiB = 2**20


def bound(budget: int) -> int:
    """The resident memory above its imports croupier may hold with ``budget``."""
    return int(1.25 * budget) + 64 * MiB


@dataclass(frozen=True)
class Tables:
    """The rollout rows in each form, and each form's persisted orders."""

    data: workloads.Data
    uris: dict[str, str]  # form -> table URI
    row_groups: dict[str, int]  # form -> rows per row group
    clumps: dict[str, int]  # form -> rows per clump of the clumped order
    windows: dict[str, int]  # form -> rows per window of the window order
    perms: dict[str, dict[str, str]]  # form -> order -> permutation URI

    @property
    def projected(self) -> int:
        """Arrow bytes of the columns read, over the whole table."""
        return int(self.data.meta["projected_bytes"])

    def budget(self, ratio: int) -> int:
        """The memory budget the projected columns are ``ratio`` times."""
        return self.projected // ratio

    def spec(
        self,
        args: argparse.Namespace,
        kind: str,
        order: str,
        form: str = "parquet",
        *,
        memory_budget: int | None = None,
        rank: int = 0,
        world_size: int = 1,
        workers: int = 0,
        in_process: bool | None = None,
    ) -> readers.Spec:
        """The reader ``kind`` in ``order`` over ``form`` (croupier's; peers read
        their own conversion of the plain Parquet files)."""
        return readers.Spec(
            kind=kind,
            order=order,
            data_folder=str(self.data.folder),
            workload=WORKLOAD,
            rows=self.data.rows,
            table_uri=self.uris[form],
            perm_uri=self.perms[form].get(order),
            num_splits=1 if order == "sequential" else args.num_splits,
            clump=self.clumps["croupier"] if kind == "lancedb" else self.clumps[form],
            workers=workers,
            in_process=in_process,
            seed=args.seed,
            memory_budget=memory_budget,
            rank=rank,
            world_size=world_size,
        )

    def folder(self, form: str) -> Path:
        """The folder of ``form``'s files on local disk."""
        if form == "parquet":
            return self.data.parquet
        return self.data.croupier_layout(*LAYOUTS[form])

    def elsewhere(self, args: argparse.Namespace, uris: dict[str, str], perms: Path) -> Tables:
        """The same tables at ``uris`` (another store holding the same files),
        with the permutations of ``args.orders`` built over them under ``perms``."""
        return replace(
            self, uris=uris, perms=permutations(args, uris, self.clumps, self.windows, perms)
        )


def permutations(
    args: argparse.Namespace,
    uris: dict[str, str],
    clumps: dict[str, int],
    windows: dict[str, int],
    folder: Path,
) -> dict[str, dict[str, str]]:
    """The permutations of ``args.orders`` over each table of ``uris``,
    persisted under ``folder``: form -> order -> permutation URI."""
    return {
        form: loader_throughput.build_permutations(
            uri,
            folder / form,
            args.orders,
            seed=args.seed,
            clump=clumps[form],
            window=windows[form],
            small_window=args.small_window,
            pow2_clump=getattr(args, "pow2_clump", 0),
        )
        for form, uri in uris.items()
    }


def prepare(args: argparse.Namespace, lance: bool, layouts: Iterable[str] = LAYOUTS) -> Tables:
    """Write (or find in the cache) the plain Parquet files, the croupier table
    in each of ``layouts`` (keys of :data:`LAYOUTS`), the Lance conversion when
    ``lance``, and the permutations of ``args.orders`` over each form."""
    data = workloads.prepare(
        workloads.WORKLOADS[WORKLOAD], args.rows, args.cache / "data", args.seed
    )
    uris = {"parquet": "file://" + str(data.parquet)}
    row_groups = {"parquet": data.workload.row_group_rows}
    for form in layouts:
        uris[form] = workloads.to_croupier(data, *LAYOUTS[form])
        first_file = next(data.croupier_layout(*LAYOUTS[form]).rglob("*.parquet"))
        row_groups[form] = pq.ParquetFile(first_file).metadata.row_group(0).num_rows
    clumps = {form: args.clump or rows for form, rows in row_groups.items()}
    windows = {form: args.window or rows for form, rows in row_groups.items()}
    if lance:
        workloads.to_lance(data)
    folder = args.cache / "perms" / f"{WORKLOAD}-{data.rows}"
    perms = permutations(args, uris, clumps, windows, folder)
    return Tables(data, uris, row_groups, clumps, windows, perms)


def failure(error: str) -> str:
    """A note of what stopped a reader, from its traceback's last line: croupier
    refusing its options ("refused") told apart from anything else ("failed")."""
    last = error.strip().splitlines()[-1]
    last = last.replace(f"file://{ROOT}/", "").replace(f"{ROOT}/", "")
    kind, _, message = last.partition(": ")
    if kind == "croupier.errors.InvalidArgumentError":
        return "refused: " + message
    return "failed: " + last


def run(
    args: argparse.Namespace, spec: readers.Spec, control: str | None = None, **options: Any
) -> dict[str, Any]:
    """Measure one reader in a fresh process: its figures, or a note why there are
    none. Bytes read are those the S3 server with control URL ``control`` sent,
    if given; ``options`` go to :func:`loader_throughput.run_child`."""
    started = time.perf_counter()
    res = loader_throughput.run_child(
        spec, args.seconds, control, timeout=args.timeout, resume=False, import_rss=True, **options
    )
    res["wall_s"] = time.perf_counter() - started
    if "error" in res:
        res["note"] = failure(res.pop("error"))
    elif not res["samples"]:
        res["note"] = "no batch"
    else:
        res["over_import"] = max(res["peak_rss"], res["peak_rss_self"]) - res["import_rss"]
    return res


# -- report ----------------------------------------------------------------------


COLUMNS = [
    "rows/s",
    "vs baseline",
    "read ÷ delivered",
    "decoded ÷ delivered",
    "RSS over imports (MiB)",
    "bound (MiB)",
    "first batch (ms)",
    "epoch read",
]


def note_cell(note: str, notes: list[str]) -> str:
    """The cell of a row without figures: its note, or a pointer to it in
    ``notes``, listed below the table by :func:`notes_lines`, when it is long."""
    if len(note) <= 60:
        return note
    if note not in notes:
        notes.append(note)
    return f"{note.partition(':')[0]}, see note {notes.index(note) + 1}"


def notes_lines(notes: list[str]) -> list[str]:
    """The long notes of a table's rows, numbered, to follow the table."""
    return ["", *(f"{i}. {n}" for i, n in enumerate(notes, 1))] if notes else []


def row_cells(r: dict[str, Any], base: float | None, notes: list[str]) -> list[str]:
    """The figures of one result, in :data:`COLUMNS` order."""
    if "note" in r:
        return [note_cell(r["note"], notes)] + [""] * (len(COLUMNS) - 1)
    delivered = r["delivered_bytes"]
    decoded = r.get("stats", {}).get("decoded_bytes")
    limit = bound(r["budget"]) if r["budget"] else None
    memory = loader_throughput.fmt(r["over_import"] / MiB, ",.0f")
    if limit and r["over_import"] > limit:
        memory += " (over)"
    return [
        loader_throughput.fmt(r["samples_per_s"], ",.0f"),
        loader_throughput.fmt(r["samples_per_s"] / base if base else None, ".2f"),
        loader_throughput.fmt(r["read_bytes"] / delivered, ".2f"),
        loader_throughput.fmt(decoded / delivered if decoded is not None else None, ".2f"),
        memory,
        loader_throughput.fmt(limit / MiB if limit else None, ",.0f"),
        loader_throughput.fmt(r["first_batch_s"] * 1e3, ",.0f"),
        f"{r['samples'] / r['rows']:.0%}",
    ]


def baseline(rows: list[dict[str, Any]]) -> float | None:
    """The rows/s of the faster pyarrow sequential scan among ``rows``, if one was
    measured."""
    return max(
        (r["samples_per_s"] for r in rows if r["kind"] == "pyarrow" and "note" not in r),
        default=None,
    )


def table_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The markdown table of every result, and the long notes of its rows."""
    base = baseline(rows)
    notes: list[str] = []
    lines = [
        "| reader | table | order | budget (MiB) | " + " | ".join(COLUMNS) + " |",
        "|---|---|---|---:|" + "---:|" * len(COLUMNS),
    ]
    for r in rows:
        budget = loader_throughput.fmt(r["budget"] / MiB if r["budget"] else None, ",.1f")
        head = f"| {r['label']} | {r['source']} | {r['order_label']} | {budget} |"
        lines.append(head + "".join(f" {c} |" for c in row_cells(r, base, notes)))
    return lines + notes_lines(notes)


def data_text(tables: Tables) -> str:
    """What the table is, in each form written: rows, bytes, row groups."""
    d, m = tables.data, tables.data.meta

    def size(form: str) -> float:
        return sum(p.stat().st_size for p in tables.folder(form).rglob("*.parquet")) / MiB

    def codec(folder: Path) -> str:  # as written, whatever the defaults were then
        first = next(folder.rglob("*.parquet"))
        return pq.ParquetFile(first).metadata.row_group(0).column(0).compression.lower()

    layouts = [
        "croupier table: `cr.create_table` with its defaults"
        f" ({codec(d.croupier)} pages), {size('croupier'):,.0f} MiB, row groups of"
        f" {tables.row_groups['croupier']:,} rows and the page index it writes"
    ]
    if "croupier-4k" in tables.uris:
        layouts.append(f"with 4 KiB pages: `page_bytes=4096`, {size('croupier-4k'):,.0f} MiB")
    if "croupier-zstd" in tables.uris:
        layouts.append(f'zstd: `compression="zstd"`, {size("croupier-zstd"):,.0f} MiB')
    return (
        f"Table: {d.workload.description}; {m['rows']:,} rows, {tables.projected / MiB:,.0f} MiB"
        " of projected columns in Arrow (every column is read). Plain Parquet: written by"
        f" pyarrow in {d.workload.files} zstd files, {m['parquet_bytes'] / MiB:,.0f} MiB, row"
        f" groups of {tables.row_groups['parquet']:,} rows, {d.workload.page_bytes // MiB} MiB"
        " pages, no page index. " + "; ".join(layouts) + f". Global batch {d.workload.batch}."
    )


def order_text(args: argparse.Namespace, tables: Tables, forms: list[str]) -> str:
    """How each order of ``args.orders`` was built and read over ``forms``."""

    def per_form(rows: dict[str, int]) -> str:
        return " and ".join(f"{rows[f]:,} rows ({FORMS[f]})" for f in forms)

    aligned = all(tables.row_groups[f] % tables.clumps[f] == 0 for f in forms)
    what = {
        "sequential": "sequential is the table's own order read with `num_splits=1`",
        "window": "window is `shuffle(seed, window=W)` with W "
        + ("" if args.window else "a row group, ")
        + per_form(tables.windows),
        "window-small": f"small-window is `shuffle(seed, window={args.small_window})`, so that"
        f" the {args.num_splits} windows a step reads at once fit the rows the smallest budget"
        " keeps",
        "clumped": f"clumped is `shuffle(seed, clump_size=C)` with C {per_form(tables.clumps)}"
        + (", so that no clump straddles a row group" if aligned else ""),
        "full": "full is `shuffle(seed)`",
        "auto": 'page-aligned clumps is `shuffle(seed, clump_size="auto")`: each clump the'
        " rows of one page of its row group's widest column",
        "pow2": "power-of-two clumps is `shuffle(seed,"
        f' clump_size={getattr(args, "pow2_clump", 0)})`, the size `clump_size="auto"` chose'
        " (the largest power of two at most the median rows of a page of the widest column)"
        " before clumps followed pages",
    }
    return (
        "Orders: "
        + "; ".join(what[o] for o in args.orders)
        + ". The shuffles are permutations persisted by `PermutationBuilder` and read with"
        f" `num_splits={args.num_splits}`."
    )


def setup_lines(args: argparse.Namespace, tables: Tables, load: tuple[float, float]) -> list[str]:
    """The setup paragraphs of the section."""
    budgets = ", ".join(
        f"{tables.budget(r) / MiB:,.1f} MiB (the table is {r} times it)" for r in args.ratios
    )
    return [
        f"Generated by `{args.command}`, run on {results.machine(load)}",
        "",
        "Versions: " + results.versions(["torch", "pyarrow", "lancedb", "pylance"]) + ".",
        "",
        data_text(tables),
        "",
        f"Memory budgets (`StreamingDataset(memory_budget=…)`, other settings default): {budgets}."
        " The budget is scaled down rather than the table up, so that the part runs in"
        " minutes; the files sit in the page cache, so what is scarce is the memory the reader"
        " may hold, not the disk.",
        "",
        "Method: each reader runs in a fresh process with `num_workers=0` and reads from the"
        f' start of the epoch for up to {args.seconds:g} s after its first batch ("epoch read"'
        " says how much; a process still running after"
        f" {args.timeout:g} s is killed); rows/s counts every batch from building the reader to"
        ' its last batch. "read ÷ delivered" is `rchar` of `/proc/<pid>/io` over the Arrow'
        ' bytes of the projected columns delivered; "decoded ÷ delivered" is croupier\'s'
        ' `stats()["decoded_bytes"]` over the same. "RSS over imports" is the peak resident'
        " memory of the process (the larger of VmHWM and a 50 ms sampling) less its resident"
        " memory once torch, pyarrow, the reader's library and croupier's Go runtime are"
        " loaded, before the reader is built, both from then on (importing torch runs"
        " `ldconfig` from a `vfork()`ed child, which shares the process's memory until it"
        " execs, and a sample that caught it counted that memory twice); croupier must keep it"
        " within the bound 1.25 times"
        ' the budget + 64 MiB ("(over)" marks a row that does not). The baseline is read first'
        ' and again last; "vs baseline" divides by the faster of the two.',
        "",
        order_text(args, tables, args.forms)
        + " Peers read the same rows with `num_workers=0` and no budget to give them: LanceDB's"
        " `StreamingDataset` over a Lance conversion (default `lance.write_dataset` settings)"
        f" with `num_splits={args.num_splits}`, `shuffle=True` and"
        f" `shuffle_clump_size={tables.clumps['croupier']:,}` (clumped) or none (full); Lance"
        " `take` of `RandomSampler` batches over that conversion; the map-style torch `Dataset`"
        " that holds the projected columns in memory (`pq.read_table`) and takes each"
        " `RandomSampler` batch.",
    ]


# -- main --------------------------------------------------------------------------


def csv(s: str) -> list[str]:
    """A comma-separated argument as a list."""
    return [x for x in s.split(",") if x]


def common_args(ap: argparse.ArgumentParser, seconds: float, timeout: float) -> None:
    """The arguments this part shares with ``bench/ranks.py``."""
    ap.add_argument(
        "--rows",
        type=int,
        default=workloads.WORKLOADS[WORKLOAD].rows,
        help="rows of the table (rounded to whole files of whole row groups)",
    )
    ap.add_argument(
        "--seconds", type=float, default=seconds, help="longest pass after a first batch"
    )
    ap.add_argument("--timeout", type=float, default=timeout, help="kill a reader after this")
    ap.add_argument("--num-splits", type=int, default=8)
    ap.add_argument(
        "--clump", type=int, default=0, help="rows per clump of the clumped order (0: a row group)"
    )
    ap.add_argument(
        "--window", type=int, default=0, help="rows per window of the window order (0: a row group)"
    )
    ap.add_argument(
        "--small-window", type=int, default=256, help="rows per window of the window-small order"
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=ROOT / "build" / "bench")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("RESULTS.md"))
    ap.add_argument("--command", default="make bench", help=argparse.SUPPRESS)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    common_args(ap, seconds=4.0, timeout=120.0)
    ap.add_argument(
        "--ratios",
        type=lambda s: [int(x) for x in csv(s)],
        default=[4, 32],
        help="projected bytes ÷ memory budget, one run of croupier each",
    )
    ap.add_argument("--orders", type=csv, default=list(ORDERS), help="of: " + ", ".join(ORDERS))
    ap.add_argument("--forms", type=csv, default=list(FORMS), help="of: " + ", ".join(FORMS))
    ap.add_argument("--peers", type=csv, default=list(PEERS), help="of: " + ", ".join(PEERS))
    args = ap.parse_args(argv)
    check_choices(ap, args, ORDERS, FORMS, PEERS)
    return args


def check_choices(
    ap: argparse.ArgumentParser,
    args: argparse.Namespace,
    orders: Iterable[str],
    forms: Iterable[str],
    peers: Iterable[str],
) -> None:
    """Fail through ``ap`` on an order, form or peer that is not known."""
    for name, given, known in (
        ("orders", args.orders, orders),
        ("forms", args.forms, forms),
        ("peers", args.peers, peers),
    ):
        if unknown := set(given) - set(known):
            ap.error(f"unknown {name}: {', '.join(sorted(unknown))}")


def cells(args: argparse.Namespace, tables: Tables) -> list[tuple[str | None, readers.Spec]]:
    """Every reader to measure, the baseline first and last, with the form croupier
    reads (None: a peer)."""
    base = tables.spec(args, "pyarrow", "sequential")
    out: list[tuple[str | None, readers.Spec]] = [(None, base)]
    for ratio in args.ratios:
        for form in args.forms:
            out += [
                (form, tables.spec(args, "croupier", o, form, memory_budget=tables.budget(ratio)))
                for o in args.orders
            ]
    for kind in args.peers:
        orders = [o for o in readers.KINDS[kind].orders if o in args.orders and o != "sequential"]
        out += [(None, tables.spec(args, kind, o)) for o in orders]
    return [*out, (None, base)]


def file_growth(r: dict[str, Any]) -> int:
    """How much of the resident bytes that mapped files (the libraries' code)
    grew from the imports to the sampled peak."""
    return r.get("peak_rss_file", 0) - r.get("import_rss_file", 0)


def progress(r: dict[str, Any]) -> str:
    """One line about a finished reader."""
    head = f"{r['label']:40s} {r['source']:26s} {r['order_label']:16s}"
    if "note" in r:
        return f"{head} {r['note']}"
    return (
        f"{head} {r['samples_per_s']:9,.0f} rows/s  read/delivered"
        f" {r['read_bytes'] / r['delivered_bytes']:6.2f}  RSS over imports"
        f" {r['over_import'] / MiB:6,.0f} MiB (files {file_growth(r) / MiB:,.0f})"
        f"  ({r['wall_s']:.0f} s)"
    )


def main(argv: list[str] | None = None) -> int:
    """Run the part; returns 1 when a reader failed, else 0."""
    args = parse_args(argv)
    load = os.getloadavg()[0]
    missing = {k: why for k in args.peers if (why := readers.missing(readers.KINDS[k]))}
    tables = prepare(args, lance=bool({"lancedb", "lance-take"} & set(args.peers) - set(missing)))
    out = []
    todo = cells(args, tables)
    for i, (form, spec) in enumerate(todo):
        label = readers.KINDS[spec.kind].label
        if spec.kind == "pyarrow":
            label += " (baseline)" if i == 0 else " (baseline, again)"
        res: dict[str, Any] = {
            "kind": spec.kind,
            "label": label,
            "source": FORMS[form] if form else PEER_SOURCES[spec.kind],
            "order": spec.order,
            "order_label": loader_throughput.ORDER_LABELS[spec.order],
            "budget": spec.memory_budget,
            "rows": tables.data.rows,
        }
        if spec.kind in missing:
            res["note"] = f"skipped: {missing[spec.kind]}"
        else:
            res.update(run(args, spec))
        out.append(res)
        print(progress(res), flush=True)
    lines = setup_lines(args, tables, (load, os.getloadavg()[0]))
    lines += ["", *table_lines(out)]
    results.update_section(args.out, "Larger than memory", lines)
    print(f"wrote the Larger than memory section of {args.out}")
    return 1 if any(r.get("note", "").startswith("failed") for r in out) else 0


if __name__ == "__main__":
    sys.exit(main())
