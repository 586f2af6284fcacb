"""Loader throughput: croupier against pyarrow's sequential reader, same data, same run.

The baseline is the sequential limit: ``pyarrow.parquet.ParquetFile.iter_batches``
over the same files, each batch converted to torch by the same conversion code
croupier uses, so the ratio isolates reading, decoding and dealing.

croupier runs over four orders of the same table:

- the identity with ``num_splits=1``: one stream, every step reads consecutive
  rows (sequential);
- the identity with ``num_splits=G``: the default, every step takes one row from
  each of G streams spread over the table (strided);
- a full shuffle (a permutation built with ``.shuffle(seed)``);
- a window shuffle (``.shuffle(seed, window=row_group)``): windows of one row
  group's worth of rows permuted, and the rows inside each window permuted.

Next to speed, each order's randomness: the Spearman correlation between a row's
position in the epoch and its row id (0 for a well mixed order, 1 for sequential),
and the number of distinct row groups a global step touches (the I/O it causes).

Run: ``make bench`` (or ``.venv/bin/python bench/loader_throughput.py --help``).
Results are printed as a table and written to ``bench/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from results import update_section

import croupier as cr
from croupier.formats import convert


def write_table(folder: Path, rows: int, files: int, row_group: int, seed: int) -> int:
    """Write pretokenized LM rows (id, tokens list<int32> of 256-1024) as Parquet."""
    rng = np.random.default_rng(seed)
    per_file = rows // files
    nbytes = 0
    for f in range(files):
        lengths = rng.integers(256, 1024, per_file)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        values = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
        tokens = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
        ids = pa.array(np.arange(f * per_file, (f + 1) * per_file, dtype=np.int64))
        table = pa.table({"id": ids, "tokens": tokens})
        nbytes += table.nbytes
        pq.write_table(
            table,
            folder / f"part-{f:03d}.parquet",
            row_group_size=row_group,
            compression="zstd",
            write_page_index=True,
        )
    return nbytes


def mixing(ids: list[np.ndarray], row_group: int) -> tuple[str, str]:
    """Of the batches as dealt: the correlation of a sample's position in the epoch
    with its row id, and the mean number of distinct row groups a batch touches."""
    order = np.concatenate(ids).astype(np.float64)
    rho = np.corrcoef(np.arange(len(order)), order)[0, 1]
    touched = np.mean([len(np.unique(b // row_group)) for b in ids])
    return f"{rho:+.3f}", f"{touched:.1f}"


def measure(batches: Iterable[dict]) -> tuple[float, int, float, list[np.ndarray]]:
    """Consume batches; return (samples/s, samples, seconds to the first batch, ids)."""
    start = time.perf_counter()
    first = None
    ids = []
    for b in batches:
        if first is None:
            first = time.perf_counter() - start
        ids.append(b["id"].numpy())
    n = sum(len(i) for i in ids)
    return n / (time.perf_counter() - start), n, first or 0.0, ids


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=80_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--row-group", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=64, help="global batch size G")
    ap.add_argument(
        "--data", type=Path, default=None, help="folder for the table (default: a temp dir)"
    )
    ap.add_argument("--out", type=Path, default=Path(__file__).with_name("RESULTS.md"))
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.data or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        nbytes = write_table(folder, args.rows, args.files, args.row_group, seed=1)
        uri = "file://" + str(folder.resolve())
        g = args.batch

        def baseline() -> Iterable[object]:
            for path in sorted(folder.glob("*.parquet")):
                for rb in pq.ParquetFile(path).iter_batches(batch_size=g, columns=["id", "tokens"]):
                    yield convert(rb, "torch")

        table = cr.open_table(uri)
        full = cr.PermutationBuilder(table).shuffle(seed=1).persist(f"{uri}/_perm_full", False)
        window = (
            cr.PermutationBuilder(table)
            .shuffle(seed=1, window=args.row_group)
            .persist(f"{uri}/_perm_window", False)
        )

        def croupier_run(source: cr.Table | cr.Permutation, splits: int) -> Iterable[object]:
            ds = cr.StreamingDataset(
                source, global_batch_size=g, num_splits=splits, columns=["id", "tokens"]
            )
            return iter(ds)

        w = f"window {args.row_group:,}"
        runs = [
            ("pyarrow iter_batches → torch (baseline)", baseline),
            ("croupier, identity, num_splits=1 (sequential)", lambda: croupier_run(table, 1)),
            (f"croupier, identity, num_splits={g} (strided)", lambda: croupier_run(table, g)),
            (f"croupier, full shuffle, num_splits={g}", lambda: croupier_run(full[0], g)),
            (f"croupier, {w} shuffle, num_splits={g}", lambda: croupier_run(window[0], g)),
            (f"croupier, {w} shuffle, num_splits=8", lambda: croupier_run(window[0], 8)),
        ]
        results = []
        for name, make in runs:
            measure(make())  # warm the page cache and imports
            rate, n, first, ids = measure(make())
            quality = mixing(ids, args.row_group)
            results.append((name, rate, n, first, *quality))
            print(
                f"{name:50s} {rate:12,.0f} samples/s  {n:8d} samples"
                f"  first batch {first * 1e3:7.1f} ms  {quality[0]} {quality[1]}"
            )

    base = results[0][1]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines = [
        "Generated by `make bench` (`bench/loader_throughput.py`).",
        "One run, the same data for every row.",
        "",
        f"Setup: {args.rows:,} rows of pretokenized LM data"
        " (id int64, tokens list<int32> of 256-1024),"
        f" {nbytes / 2**20:,.0f} MiB in Arrow, {args.files} zstd Parquet files, row groups of"
        f" {args.row_group:,} rows, local files; global batch {g}, torch format, num_workers=0;"
        f" {os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()};"
        f" peak RSS of the run {peak_mb:,.0f} MiB.",
        "",
        "| reader | samples/s | ratio to baseline | first batch (ms) | position~id correlation"
        " | row groups per step |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, rate, _, first, rho, touched in results:
        lines.append(
            f"| {name} | {rate:,.0f} | {rate / base:.2f}x | {first * 1e3:.1f} | {rho} | {touched} |"
        )
    update_section(args.out, "Loader throughput", lines)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
