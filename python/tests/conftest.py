"""Fixtures that write real Parquet tables with pyarrow into temporary folders."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

# A factory: write_table(folder, file_sizes, start_id=0) -> file:// URI of the folder.
WriteTable = Callable[..., str]

# The tests that interrupt a child with SIGINT need Python's KeyboardInterrupt
# in it. A suite started in the background by a non-interactive shell (`make
# test &`) inherits SIGINT ignored, and so would every child it starts:
# restore the default here, so that children start with it.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True, scope="session")
def _cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Tables opened without ``cache_dir`` keep their blocks in a temporary
    folder of the session, and so do the processes the tests start: no test
    writes to ``~/.cache``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CROUPIER_CACHE_DIR", str(tmp_path_factory.mktemp("blocks")))
        yield


def rows(start: int, n: int) -> pa.Table:
    """Rows ``start .. start+n`` of the test table; every value is derived from ``id``."""
    ids = np.arange(start, start + n, dtype=np.int64)
    lengths = ids % 7  # 0..6 tokens, including empty lists
    tokens = [list(range(i, i + k)) for i, k in zip(ids.tolist(), lengths.tolist(), strict=True)]
    return pa.table(
        {
            "id": pa.array(ids),
            "tokens": pa.array(tokens, type=pa.list_(pa.int32())),
            "reward": pa.array(ids.astype(np.float32) * 0.5),
            "flag": pa.array(ids % 3 == 0),
            "text": pa.array([f"row {i}" for i in ids.tolist()]),
        }
    )


def write_files(folder: Path, file_sizes: Sequence[int], start_id: int = 0) -> list[Path]:
    """Write ``part-00000.parquet``, ... holding consecutive ids; returns the paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    next_id = start_id
    for i, n in enumerate(file_sizes):
        path = folder / f"part-{i:05d}.parquet"
        pq.write_table(rows(next_id, n), path, row_group_size=100, write_page_index=True)
        paths.append(path)
        next_id += n
    return paths


def uri(path: Path) -> str:
    return "file://" + str(path.resolve())


@pytest.fixture
def write_table(tmp_path: Path) -> WriteTable:
    """Factory writing a table of consecutive ids split over files of the given sizes."""

    def write(name: str, file_sizes: Sequence[int], start_id: int = 0) -> str:
        folder = tmp_path / name
        write_files(folder, file_sizes, start_id)
        return uri(folder)

    return write


@pytest.fixture(scope="session")
def table_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A shared read-only table: 1003 rows (ids 0..1002) in three uneven files."""
    folder = tmp_path_factory.mktemp("shared") / "table"
    write_files(folder, [400, 350, 253])
    return uri(folder)


@pytest.fixture(scope="session")
def num_rows() -> int:
    return 1003


def plain(value: object) -> object:
    """A converted batch as comparable Python values (NaN as a string)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, pa.RecordBatch):
        return value.schema, value.to_pylist()
    if isinstance(value, np.ndarray) and value.dtype == object:  # e.g. lists: arrays
        return "object", value.shape, [plain(v) for v in value]
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return str(value.dtype), tuple(value.shape), plain(value.tolist())
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, float) and np.isnan(value):
        return "nan"
    return value
