"""Pages larger than 64 MiB, as pyarrow writes them for one large cell, are read."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from conftest import uri

import croupier as cr


def test_reads_a_100_mb_page_and_dictionary_page(tmp_path: Path) -> None:
    big = b"x" * 100_000_000
    data = pa.table(
        {
            "id": pa.array([0, 1, 2], pa.int64()),
            "blob": pa.array([b"a", big, b"c"], pa.binary()),
            "dict": pa.array([b"d", big, b"d"], pa.binary()),
        }
    )
    path = tmp_path / "big.parquet"
    pq.write_table(data, path, compression="none", use_dictionary=["dict"])
    meta = pq.ParquetFile(path).metadata.row_group(0)
    assert meta.column(2).has_dictionary_page
    assert meta.column(1).total_compressed_size > 64 << 20
    del data
    with cr.open_table(uri(path)) as tbl:
        got = tbl.take([1, 2, 0])
    assert got["id"].to_pylist() == [1, 2, 0]
    blobs, dicts = got["blob"].to_pylist(), got["dict"].to_pylist()
    for column in (blobs, dicts):
        assert [len(b) for b in column] == [len(big), 1, 1]
        assert column[0] == big
