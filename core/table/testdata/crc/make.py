"""Writes the Parquet files of core/table's page CRC tests and benchmark.

pages-crc.parquet and pages-nocrc.parquet hold the same 2,048 rows, written by
pyarrow in row groups of 512 rows and pages of about 2 KiB with an offset
index, the id column zstd, the others snappy; the first with page CRCs, the
second without. Run from the repository root: .venv/bin/python core/table/testdata/crc/make.py
"""

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

N = 2048
table = pa.table(
    {
        "id": pa.array(range(N), pa.int64()),
        "reward": pa.array([None if i % 7 == 0 else i / 8 for i in range(N)], pa.float32()),
        "text": pa.array([f"row {i} " + "x" * (i % 23) for i in range(N)], pa.string()),
        "tokens": pa.array([list(range(i, i + i % 9)) for i in range(N)], pa.list_(pa.int32())),
    }
)
here = Path(__file__).parent
for name, crc in [("pages-crc.parquet", True), ("pages-nocrc.parquet", False)]:
    pq.write_table(
        table,
        here / name,
        row_group_size=512,
        data_page_size=2048,
        compression={"id": "zstd", "reward": "snappy", "text": "snappy", "tokens": "snappy"},
        use_dictionary=False,
        write_page_index=True,
        write_page_checksum=crc,
    )
