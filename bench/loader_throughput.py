"""Loader throughput: croupier and its peers on the same rows, in the same run.

For each workload (``bench/workloads.py``: pretokenized LM rows, RL rollouts
read 3 of 31 columns, small scalar rows) the harness runs, each in a fresh
process:

- the baseline, pyarrow ``ParquetFile.iter_batches`` → torch: the sequential
  limit of the Parquet files, and the denominator of every ratio;
- croupier (``croupier.DataLoader`` over a ``StreamingDataset``) in four orders
  built with ``PermutationBuilder``: sequential (the table's own order, one
  stream), clumped (``shuffle(seed, clump_size=C)``), window
  (``shuffle(seed, window=row group)``) and full (``shuffle(seed)``), on local
  files with ``num_workers=0``; the full shuffle with each other
  ``--workers`` count of worker processes (``in_process=False``: the
  DataLoader would read in the training process); sequential and full over
  the local S3-compatible server with no added latency and with
  ``--s3-latency`` ms before each request's first byte;
- the peers (``bench/readers.py``), on local files with ``num_workers=0``:
  LanceDB's ``StreamingDataset`` in the orders croupier has that it offers
  (sequential, clumped, full), and the others in the order each offers for
  training: a map-style torch ``Dataset`` over a pyarrow table with
  ``RandomSampler``, HF ``datasets`` streaming with its shuffle buffer, Lance
  (``LanceDataset`` with a randomized batch sampler, and ``take`` with
  ``RandomSampler``), MosaicML ``StreamingDataset`` (py1e). A peer whose
  library is not installed is listed as skipped.

Each reader is read once from the start of an epoch for up to ``--seconds``
(the whole epoch when it is done sooner), then once more from 90 % of the
epoch through its own resume mechanism, where it has one. The figures:
samples/s and MB/s from building the reader to its last batch, bytes read ÷ bytes of the projected
columns delivered, peak resident memory of the process tree, time to the first
batch, time to the first batch after a resume, and the order's randomness: the
correlation of position with row id and the distinct row groups a batch holds.

Data (and its Lance and MDS conversions) is written once into ``--cache`` and
reused. Results are printed, written to the "Loader throughput" section of
``--out`` and plotted under ``--plots``. ``make bench`` runs this through
``bench/run.py``; ``--help`` lists the knobs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import measure
import numpy as np
import readers
import results
import workloads

ROOT = Path(__file__).resolve().parents[1]
ORDERS = ("sequential", "clumped", "window", "full")
ORDER_LABELS = {
    "sequential": "sequential",
    "clumped": "clumped shuffle",
    "auto": "page-aligned clumps (auto)",
    "pow2": "power-of-two clumps",
    "window": "window shuffle",
    "window-small": "small-window shuffle",
    "full": "full shuffle",
    "batch": "batch order shuffle",
    "buffer": f"shuffle buffer {readers.HF_SHUFFLE_BUFFER:,}",
    "py1e": "py1e shuffle",
}
PEERS = ("lancedb", "torch-map", "hf", "lance-batch", "lance-take", "mosaic")
# The workloads of this part; "rollout" is the larger-than-memory and ranks parts'.
WORKLOADS = ("lm", "rl", "scalar")


@dataclass(frozen=True)
class Run:
    """One reader on one workload, storage and worker count."""

    workload: str
    kind: str
    order: str
    storage: str = "local"  # local, s3 or s3+<ms>ms
    workers: int = 0

    @property
    def reader_kind(self) -> readers.ReaderKind:
        """What :mod:`readers` knows of the reader."""
        return readers.KINDS[self.kind]

    @property
    def delay_ms(self) -> float:
        """The S3 server's delay before each request's first byte."""
        if not self.storage.startswith("s3+"):
            return 0.0
        return float(self.storage.removeprefix("s3+").removesuffix("ms"))

    def short(self) -> str:
        """A few words for plots: reader, order, storage, workers."""
        words = [self.kind, self.order]
        words += [self.storage] if self.storage != "local" else []
        words += [f"{self.workers}w"] if self.workers else []
        return " ".join(words)

    def label(self) -> str:
        parts = [self.reader_kind.label]
        if self.storage != "local":
            parts.append("S3" if self.storage == "s3" else f"S3 +{self.delay_ms:g} ms")
        if self.workers:
            parts.append(f"{self.workers} worker processes")
        return ", ".join(parts) + (" (baseline)" if self.kind == "pyarrow" else "")


def matrix(args: argparse.Namespace) -> list[Run]:
    """The runs the arguments select, baseline first for each workload."""
    kinds = args.readers
    runs: list[Run] = []
    for w in args.workloads:
        if "pyarrow" in kinds:
            runs.append(Run(w, "pyarrow", "sequential"))
        if "croupier" in kinds:
            runs += [Run(w, "croupier", o) for o in args.orders]
            runs += [Run(w, "croupier", "full", workers=n) for n in args.workers if n]
            for s in args.storage:
                runs += [
                    Run(w, "croupier", o, s) for o in ("sequential", "full") if o in args.orders
                ]
        for k in PEERS:
            if k in kinds:
                orders = readers.KINDS[k].orders
                runs += [Run(w, k, o) for o in orders if o in args.orders or o not in ORDERS]
    return runs


# -- the measuring process ---------------------------------------------------------


def child(payload: dict[str, Any]) -> None:
    """Build one reader, measure a pass and a resume, write the figures as JSON.

    Beside the spec and the time limit the payload may ask for: no resume
    (``"resume": False``); the resident bytes once everything is imported
    (``"import_rss": True``: croupier's library is loaded first in every
    reader's process, as peers import theirs when built, so that its runtime
    counts as an import); a start line shared with other reader processes
    (``"barrier"``: the folder of :func:`measure.await_start`, and ``"name"``);
    no more than a number of batches (``"batches"``).
    """
    spec = readers.Spec(**payload["spec"])
    data = workloads.Data(workloads.WORKLOADS[spec.workload], Path(spec.data_folder), spec.rows)
    if payload["control"]:
        bytes_read = measure.server_bytes_read(payload["control"])
    else:
        bytes_read = measure.local_bytes_read
    out: dict[str, Any] = {}
    try:
        reader = readers.build(spec)
        readers.warm_up()
        if payload.get("import_rss"):
            import croupier

            croupier.version()
            out["import_rss"] = measure.tree_rss(os.getpid())
            out["import_rss_file"] = measure.tree_rss(os.getpid(), "RssFile")
            # Peaks count from here on: importing torch runs ldconfig from a
            # vfork()ed child, which shares this process's memory until it
            # execs, and a sample of the process tree then counted it twice.
            measure.reset_peak_rss()
            imported_marker(payload["result"]).touch()
        if payload.get("barrier"):
            measure.await_start(payload["barrier"], payload["name"])
        m, ids = measure.measure(
            reader.make,
            row_bytes=data.row_bytes(),
            row_group_rows=data.workload.row_group_rows,
            bytes_read=bytes_read,
            seconds=payload["seconds"],
            batches=payload.get("batches"),
            on_first=lambda s: first_batch_note(payload["result"]).write_text(repr(s)),
        )
        out.update(m.as_dict(), steps=reader.steps)
        if reader.stats is not None:
            out["stats"] = reader.stats()
        if payload.get("resume", True) and reader.resume is not None and not spec.workers:
            step = int(reader.steps * 0.9)
            resume = reader.resume
            out["resume_s"], resumed = measure.first_batch(lambda: resume(step))
            # where the pass got that far, the resumed batch must be its batch `step`
            if len(ids) > step:
                out["resume_exact"] = bool(np.array_equal(ids[step], resumed))
    except Exception:
        out["error"] = traceback.format_exc()
    out["peak_rss_self"] = measure.peak_rss()
    Path(payload["result"]).write_text(json.dumps(out))


def first_batch_note(result: str) -> Path:
    """The file a child writes the seconds to its first batch into as it comes,
    for a result of a child killed later."""
    return Path(result + ".first")


def imported_marker(result: str) -> Path:
    """The file a child asked for ``import_rss`` creates once it has measured it."""
    return Path(result + ".imported")


def run_child(
    spec: readers.Spec,
    seconds: float,
    control: str | None,
    *,
    timeout: float | None = None,
    env: dict[str, str] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """Measure ``spec`` in a fresh process; add the peak RSS of its process tree.

    ``options`` go to :func:`child` in its payload; ``env`` is added to the
    process's environment (which croupier's Go runtime reads as it loads). A
    process still running after ``timeout`` seconds is killed with its
    DataLoader workers, and the result says so.
    """
    with tempfile.TemporaryDirectory(prefix="croupier-bench-") as tmp:
        result = Path(tmp) / "result.json"
        workers = Path(tmp) / "workers"
        workers.mkdir()
        payload = {
            **options,
            "spec": asdict(spec),
            "seconds": seconds,
            "control": control,
            "result": str(result),
        }
        env = {**os.environ, **(env or {}), measure.WORKER_IO_ENV: str(workers)}
        cmd = [sys.executable, __file__, "--child", json.dumps(payload)]
        log = Path(tmp) / "stderr"
        deadline = time.monotonic() + timeout if timeout else float("inf")
        with log.open("wb") as stderr:  # a file, not a pipe nobody reads until the end
            # its own process group, so that a timeout also ends its workers
            proc = subprocess.Popen(
                cmd, env=env, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True
            )
            peak = peak_file = 0  # the most resident bytes sampled, and their part mapping files
            imported = imported_marker(str(result))
            try:
                # Sampled until the child has written its figures (the
                # interpreter's teardown after that pages in tens of MiB of
                # the libraries' code, torch's too, which is no reader's),
                # and, where it measures its imports, from then on.
                while proc.poll() is None and time.monotonic() < deadline:
                    if (
                        not result.exists()
                        and (imported.exists() or not options.get("import_rss"))
                        and (now := measure.tree_rss(proc.pid)) > peak
                    ):
                        peak, peak_file = now, measure.tree_rss(proc.pid, "RssFile")
                    time.sleep(0.05)
            finally:  # past the deadline, or interrupted
                killed = proc.poll() is None
                if killed:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        if killed:
            error = f"still running after {timeout:g} s: killed"
            if (first := first_batch_note(str(result))).exists():
                error += f", its first batch came after {float(first.read_text()):,.1f} s"
            return {"error": error}
        if not result.exists():
            tail = log.read_text(errors="replace")[-2000:]
            return {"error": f"exit status {proc.returncode}: {tail}"}
        out = json.loads(result.read_text())
        out["peak_rss"], out["peak_rss_file"] = peak, peak_file
        return out


# -- setting up the data and the stores ----------------------------------------------


@dataclass
class S3Server:
    """The local S3-compatible server (``internal/s3serve``) and its control URL."""

    proc: subprocess.Popen[str]
    control: str
    uris: dict[str, str]

    @classmethod
    def start(cls, build_dir: Path, folders: dict[str, Path]) -> S3Server:
        binary = build_dir / "s3serve"
        subprocess.run(
            ["go", "build", "-o", str(binary), "./internal/s3serve"], cwd=ROOT, check=True
        )
        args = [f"{name}={folder}" for name, folder in folders.items()]
        proc = subprocess.Popen(
            [str(binary), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            proc.wait()
            raise RuntimeError(f"internal/s3serve exited with status {proc.returncode}")
        info = json.loads(line)
        return cls(proc, info["control"], info["uris"])

    def close(self) -> None:
        """Closing its standard input stops the server."""
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def build_permutations(
    table_uri: str,
    folder: Path,
    orders: list[str],
    *,
    seed: int,
    clump: int,
    window: int,
    small_window: int = 0,
    pow2_clump: int = 0,
) -> dict[str, str]:
    """Persist the permutation of each shuffled order of a table; returns their URIs.

    clumped is ``shuffle(seed, clump_size=clump)``, window ``shuffle(seed,
    window=window)`` (clumps of one row), window-small the same with
    ``small_window``, full ``shuffle(seed)``, auto ``shuffle(seed,
    clump_size="auto")`` (page-aligned clumps), pow2 ``shuffle(seed,
    clump_size=pow2_clump)``.
    """
    import croupier as cr

    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    table = cr.open_table(table_uri)
    uris = {}
    for order in orders:
        if order == "sequential":
            continue  # the table itself
        b = cr.PermutationBuilder(table)
        if order == "clumped":
            b.shuffle(seed=seed, clump_size=clump)
        elif order == "auto":
            b.shuffle(seed=seed, clump_size="auto")
        elif order == "pow2":
            b.shuffle(seed=seed, clump_size=pow2_clump)
        elif order in ("window", "window-small"):
            b.shuffle(seed=seed, window=window if order == "window" else small_window)
        else:
            b.shuffle(seed=seed)
        uri = "file://" + str(folder / order)
        b.persist(uri, progress=False).close()
        uris[order] = uri
    table.close()
    return uris


# -- report ----------------------------------------------------------------------


def fmt(value: float | None, pattern: str) -> str:
    return "—" if value is None else format(value, pattern)


def row_figures(r: dict[str, Any], base: float | None) -> dict[str, str]:
    """The table cells of one result."""
    if "note" in r:
        return {"note": r["note"]}
    delivered = r["delivered_bytes"]
    mb_s = r["samples_per_s"] * delivered / r["samples"] / 1e6 if r["samples"] else 0
    return {
        "samples/s": fmt(r["samples_per_s"], ",.0f"),
        "vs baseline": fmt(r["samples_per_s"] / base if base else None, ".2f"),
        "MB/s": fmt(mb_s, ",.0f"),
        "read ÷ delivered": fmt(r["read_bytes"] / delivered if delivered else None, ".2f"),
        "peak RSS (MiB)": fmt(r["peak_rss"] / 2**20, ",.0f"),
        "first batch (ms)": fmt(r["first_batch_s"] * 1e3, ",.0f"),
        "resume at 90 % (ms)": fmt(r["resume_s"] * 1e3 if "resume_s" in r else None, ",.0f")
        + (" (wrong batch)" if r.get("resume_exact") is False else ""),
        "position~id": fmt(r["position_corr"], "+.3f"),
        "row groups / batch": fmt(r["row_groups_per_batch"], ".1f"),
        "epoch read": f"{r['samples'] / r['rows']:.0%}",
    }


COLUMNS = [
    "samples/s",
    "vs baseline",
    "MB/s",
    "read ÷ delivered",
    "peak RSS (MiB)",
    "first batch (ms)",
    "resume at 90 % (ms)",
    "position~id",
    "row groups / batch",
    "epoch read",
]


def table_lines(rows: list[dict[str, Any]]) -> list[str]:
    """A markdown table of one workload's results."""
    base = next(
        (r["samples_per_s"] for r in rows if r["kind"] == "pyarrow" and "note" not in r), None
    )
    lines = [
        "| reader | order | " + " | ".join(COLUMNS) + " |",
        "|---|---|" + "---:|" * len(COLUMNS),
    ]
    for r in rows:
        cells = row_figures(r, base)
        head = f"| {r['label']} | {ORDER_LABELS.get(r['order'], r['order'])} |"
        if "note" in cells:
            lines.append(head + f" {cells['note']} |" + " |" * (len(COLUMNS) - 1))
        else:
            lines.append(head + "".join(f" {cells[c]} |" for c in COLUMNS))
    return lines


def s3_lines(rows: list[dict[str, Any]], latency: float) -> list[str]:
    """A markdown table of croupier over S3 against its local-file rate, per
    workload and order: over the whole measurement (start-up included, as in
    the tables above), and from the first batch on."""
    lines = [
        "| workload | order | local (samples/s) | S3 ÷ local | S3"
        f" +{latency:g} ms ÷ local | from the first batch on: S3 ÷ local | S3 +{latency:g} ms"
        " ÷ local |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    runs = {
        (r["workload"], r["order"], r["storage"]): r
        for r in rows
        if r["kind"] == "croupier" and not r["workers"] and "note" not in r
    }
    for (workload, order, storage), local in runs.items():
        remote = [runs.get((workload, order, s)) for s in ("s3", f"s3+{latency:g}ms")]
        if storage != "local" or None in remote:
            continue
        ratios = [fmt(r["samples_per_s"] / local["samples_per_s"], ".2f") for r in remote]
        ratios += [fmt(r["after_first_per_s"] / local["after_first_per_s"], ".2f") for r in remote]
        lines.append(
            f"| {workload} | {ORDER_LABELS[order]} | {local['samples_per_s']:,.0f} | "
            + " | ".join(ratios)
            + " |"
        )
    return lines


def setup_lines(
    args: argparse.Namespace, datas: dict[str, workloads.Data], load: tuple[float, float]
) -> list[str]:
    """The setup paragraph of the section: data, sizes, machine, versions, command."""
    lines = [f"Generated by `{args.command}`, run on {results.machine(load)}", ""]
    lines.append(
        "Versions: "
        + results.versions(
            ["torch", "pyarrow", "numpy", "datasets", "pylance", "mosaicml-streaming"]
        )
        + "."
    )
    lines.append("")
    for name, d in datas.items():
        w, m = d.workload, d.meta
        mib = {
            k: f"{m[k] / 2**20:,.0f} MiB"
            for k in ("arrow_bytes", "projected_bytes", "parquet_bytes")
        }
        lines.append(
            f"- **{name}**: {w.description}. {m['rows']:,} rows, {mib['arrow_bytes']} in Arrow"
            f" ({mib['projected_bytes']} projected), {mib['parquet_bytes']} in {w.files} zstd"
            f" Parquet files with row groups of {w.row_group_rows:,} rows and a page index;"
            f" global batch {w.batch:,}."
        )
    lines += [
        "",
        "Method: each reader runs in a fresh process and reads from the start of the epoch for"
        f' up to {args.seconds:g} s ("epoch read" says how much); samples/s and MB/s count every'
        " batch over the time from building the reader to its last batch, so work done before"
        ' the first batch counts. "read ÷ delivered" is the bytes read (local files: `rchar`'
        " of `/proc/<pid>/io` of the process and its DataLoader workers, less the workers'"
        " start-up; S3: the body bytes the server sent) over the Arrow bytes of the projected"
        " columns delivered. Peak RSS is summed over the process tree, torch and the libraries"
        ' included. "resume" is the time from building the reader to its first batch when it'
        " starts at 90 % of the epoch through its own resume mechanism (— where it has none;"
        ' measured with `num_workers=0`: workers add the start-up their "first batch" shows).'
        ' "position~id" is the Pearson correlation of a sample\'s position in the pass with its'
        ' row id (1: the stored order, 0: no trace of it); "row groups / batch" counts the'
        " distinct row groups of the Parquet layout (id // row group rows) a batch holds.",
        "",
        f"Orders: croupier sequential is the table's order with `num_splits=1`; the shuffles are"
        f" persisted permutations read with `num_splits={args.num_splits}`: clumped"
        f" `shuffle(seed, clump_size={args.clump})`, window `shuffle(seed, window=<row group"
        " rows>)`, full `shuffle(seed)`. Peers on local files with `num_workers=0` in their own"
        " training order: the map-style torch `Dataset` holds the projected columns in memory"
        " (`pq.read_table`) and takes each batch of a `RandomSampler`; HF `datasets` streams the"
        f" same Parquet files with `.shuffle(seed, buffer_size={readers.HF_SHUFFLE_BUFFER})`;"
        " LanceDB's `StreamingDataset` and `StreamingDataLoader` read a Lance conversion of the"
        " same rows with the same `num_splits`, in order (`shuffle=False`), clumped"
        f" (`shuffle_clump_size={args.clump}`) and shuffled (`shuffle=True`), its per-row items"
        " being references into the Arrow batches that the collate function gathers with one"
        " `take`;"
        " Lance reads that conversion (default `lance.write_dataset` settings) with"
        " `LanceDataset` and `ShardedBatchSampler(randomize=True)` (consecutive rows, batches in"
        " random order), or with `take` of `RandomSampler` batches; MosaicML `StreamingDataset`"
        " reads an MDS conversion (uncompressed, default shard size) with `shuffle=True`"
        " (py1e). Conversions are made once and cached, outside the timed part. S3: the"
        " local S3-compatible server (`internal/s3test`, in memory, run by `internal/s3serve`),"
        f" waiting 0 and {args.s3_latency:g} ms before it serves each request, as a distant store"
        " delays the first byte.",
    ]
    return lines


def report(
    args: argparse.Namespace,
    datas: dict[str, workloads.Data],
    results_: list[dict[str, Any]],
    load: tuple[float, float],
) -> list[str]:
    lines = setup_lines(args, datas, load)
    for name in datas:
        lines += ["", f"### {name}", ""]
        lines += table_lines([r for r in results_ if r["workload"] == name])
    s3 = s3_lines(results_, args.s3_latency)
    if len(s3) > 2:
        lines += [
            "",
            "### Over S3",
            "",
            "croupier's rate over the local S3 server against its own rate on local files, in"
            " the same run: over the whole measurement as above, where opening the table and"
            " the first batch count, and from the first batch to the last. Opening a plain"
            " Parquet table takes two round trips and the first batch a third.",
            "",
            *s3,
        ]
    return lines


# -- main --------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    csv = lambda s: [x for x in s.split(",") if x]  # noqa: E731
    ap.add_argument("--workloads", type=csv, default=list(WORKLOADS))
    ap.add_argument(
        "--readers", type=csv, default=list(readers.KINDS), help="of: " + ", ".join(readers.KINDS)
    )
    ap.add_argument("--orders", type=csv, default=list(ORDERS), help="croupier orders")
    ap.add_argument(
        "--workers",
        type=lambda s: [int(x) for x in csv(s)],
        default=[0, 2],
        help="croupier worker processes (in_process=False; the full shuffle runs with each)",
    )
    ap.add_argument(
        "--storage",
        type=csv,
        default=["s3", "s3+latency"],
        help="S3 storages for croupier (s3, s3+latency); local files always",
    )
    ap.add_argument("--s3-latency", type=float, default=50, help="ms before each S3 request")
    ap.add_argument(
        "--scale",
        type=float,
        default=4.0,
        help="multiply every workload's rows (4: the lm table outgrows half the memory budget)",
    )
    ap.add_argument("--seconds", type=float, default=5.0, help="longest pass of one reader")
    ap.add_argument("--num-splits", type=int, default=8)
    ap.add_argument("--clump", type=int, default=64, help="rows per clump of the clumped order")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cache", type=Path, default=ROOT / "build" / "bench")
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("RESULTS.md"))
    ap.add_argument("--plots", type=Path, default=Path(__file__).with_name("plots"))
    ap.add_argument("--command", default="make bench", help=argparse.SUPPRESS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    for name, given, known in (
        ("workloads", args.workloads, workloads.WORKLOADS),
        ("readers", args.readers, readers.KINDS),
        ("orders", args.orders, ORDERS),
    ):
        if unknown := set(given) - set(known):
            ap.error(f"unknown {name}: {', '.join(sorted(unknown))}")
    args.storage = [f"s3+{args.s3_latency:g}ms" if s == "s3+latency" else s for s in args.storage]
    return args


def prepare(args: argparse.Namespace, runs: list[Run]) -> dict[str, workloads.Data]:
    """Write (or find in the cache) each workload's data and the conversions it needs."""
    datas = {}
    for name in args.workloads:
        w = workloads.WORKLOADS[name]
        d = workloads.prepare(w, int(w.rows * args.scale), args.cache / "data", args.seed)
        kinds = {r.kind for r in runs if r.workload == name and not readers.missing(r.reader_kind)}
        if kinds & {"lancedb", "lance-batch", "lance-take"}:
            workloads.to_lance(d)
        if "mosaic" in kinds:
            workloads.to_mds(d)
        datas[name] = d
    return datas


def progress(res: dict[str, Any]) -> str:
    """One line about a finished run."""
    order = ORDER_LABELS.get(res["order"], res["order"])
    head = f"{res['workload']:7s} {res['label']:45s} {order:20s}"
    if "note" in res:
        return f"{head} {res['note']}"
    return (
        f"{head} {res['samples_per_s']:10,.0f} samples/s  first batch"
        f" {res['first_batch_s'] * 1e3:6.0f} ms  read/delivered"
        f" {res['read_bytes'] / max(res['delivered_bytes'], 1):5.2f}  ({res['wall_s']:.0f} s)"
    )


def run_all(
    args: argparse.Namespace, runs: list[Run], datas: dict[str, workloads.Data]
) -> list[dict[str, Any]]:
    """Measure every run; a reader whose library is missing is noted as skipped."""
    server = None
    if any(r.storage != "local" for r in runs):
        server = S3Server.start(args.cache / "bin", {n: d.parquet for n, d in datas.items()})
    out: list[dict[str, Any]] = []
    try:
        # The permutations of every croupier order, per table (local and S3).
        perms: dict[tuple[str, bool], dict[str, str]] = {}
        for r in runs:
            key = (r.workload, r.storage != "local")
            if r.kind == "croupier" and key not in perms:
                uri = "file://" + str(datas[r.workload].parquet)
                if server and key[1]:
                    uri = server.uris[r.workload]
                folder = args.cache / "perms" / f"{r.workload}-{'s3' if key[1] else 'local'}"
                rg = datas[r.workload].workload.row_group_rows
                built = build_permutations(
                    uri, folder, args.orders, seed=args.seed, clump=args.clump, window=rg
                )
                perms[key] = {"table": uri, **built}
        for r in runs:
            res: dict[str, Any] = {
                **asdict(r),
                "label": r.label(),
                "short": r.short(),
                "rows": datas[r.workload].rows,
            }
            if why := readers.missing(r.reader_kind):
                res["note"] = f"skipped: {why}"
            else:
                uris = perms.get((r.workload, r.storage != "local"), {})
                spec = readers.Spec(
                    kind=r.kind,
                    order=r.order,
                    data_folder=str(datas[r.workload].folder),
                    workload=r.workload,
                    rows=datas[r.workload].rows,
                    table_uri=uris.get("table", ""),
                    perm_uri=uris.get(r.order),
                    num_splits=1 if r.order == "sequential" else args.num_splits,
                    clump=args.clump,
                    workers=r.workers,
                    seed=args.seed,
                    # processes, which cr.DataLoader would not start for them
                    in_process=False if r.workers else None,
                )
                control = None
                if server and r.storage != "local":
                    control = server.control
                    measure.set_server_delay(control, r.delay_ms)
                started = time.perf_counter()
                res.update(run_child(spec, args.seconds, control))
                res["wall_s"] = time.perf_counter() - started
                if "error" in res:
                    res["note"] = "failed: " + res.pop("error").strip().splitlines()[-1]
            out.append(res)
            print(progress(res), flush=True)
    finally:
        if server:
            server.close()
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns 1 when a reader failed, else 0."""
    args = parse_args(argv)
    if args.child:
        child(json.loads(args.child))
        return 0
    load = os.getloadavg()[0]
    runs = matrix(args)
    datas = prepare(args, runs)
    out = run_all(args, runs, datas)
    lines = report(args, datas, out, (load, os.getloadavg()[0]))
    lines += [
        "",
        results.image(args.out, args.plots, "loader_throughput.png", "Loader throughput"),
        results.image(args.out, args.plots, "loader_mixing.png", "Speed against mixing"),
    ]
    results.update_section(args.out, "Loader throughput", lines)
    print(f"wrote the Loader throughput section of {args.out}")
    results.draw("loader", out, args.plots)
    return 1 if any(r.get("note", "").startswith("failed") for r in out) else 0


if __name__ == "__main__":
    sys.exit(main())
