"""open_table on folders, files and globs; pins, versions, pickling, lifetime."""

from __future__ import annotations

import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import WriteTable, rows, uri, write_files

import croupier as cr


def test_open_folder(write_table: WriteTable) -> None:
    u = write_table("t", [30, 20, 10])
    with cr.open_table(u) as tbl:
        assert tbl.num_rows == 60
        assert tbl.num_files == 3
        assert tbl.uri == u
        assert isinstance(tbl.version, str)
        assert tbl.version
        assert tbl.schema.names == ["id", "tokens", "reward", "flag", "text"]
        assert tbl.schema.field("id").type == pa.int64()
        assert tbl.schema.field("tokens").type.value_type == pa.int32()


def test_open_single_file_and_glob(tmp_path: Path) -> None:
    write_files(tmp_path / "a", [30, 20])
    write_files(tmp_path / "b", [7], start_id=50)
    single = cr.open_table(uri(tmp_path / "a" / "part-00001.parquet"))
    assert (single.num_rows, single.num_files) == (20, 1)
    glob = cr.open_table(uri(tmp_path / "a") + "/*.parquet")
    assert (glob.num_rows, glob.num_files) == (50, 2)
    one = cr.open_table(uri(tmp_path / "a") + "/part-0000[1].parquet")
    assert one.num_rows == 20


def test_version_stable_across_reopen_and_changes_after_rewrite(tmp_path: Path) -> None:
    paths = write_files(tmp_path / "t", [30, 20])
    u = uri(tmp_path / "t")
    first = cr.open_table(u).version
    assert cr.open_table(u).version == first
    pq.write_table(rows(0, 25), paths[0])
    assert cr.open_table(u).version != first


def test_version_argument(write_table: WriteTable) -> None:
    u = write_table("t", [10])
    tbl = cr.open_table(u)
    assert cr.open_table(u, version=tbl.version).version == tbl.version
    with pytest.raises(cr.InvalidArgumentError, match="not-a-version"):
        cr.open_table(u, version="not-a-version")


def test_pickle_reopens_the_pinned_version(tmp_path: Path) -> None:
    paths = write_files(tmp_path / "t", [30, 20])
    tbl = cr.open_table(uri(tmp_path / "t"))
    copy = pickle.loads(pickle.dumps(tbl))
    assert (copy.uri, copy.version, copy.num_rows) == (tbl.uri, tbl.version, tbl.num_rows)
    assert copy.schema == tbl.schema  # reopened from the pin on first use

    pq.write_table(rows(0, 31), paths[0])  # size changes
    stale = pickle.loads(pickle.dumps(tbl))

    def read_all() -> None:
        for _ in cr.StreamingDataset(stale, global_batch_size=10, format="numpy"):
            pass

    with pytest.raises(cr.ChangedError, match=r"part-00000\.parquet"):
        read_all()


def test_close(write_table: WriteTable) -> None:
    tbl = cr.open_table(write_table("t", [10]))
    tbl.close()
    tbl.close()  # idempotent
    assert tbl.closed
    assert tbl.num_rows == 10  # cached facts stay readable
    with pytest.raises(cr.ClosedError):
        _ = tbl.schema
    with pytest.raises(TypeError):
        cr.Table()


def test_stats(write_table: WriteTable) -> None:
    tbl = cr.open_table(write_table("t", [300, 200]))
    ds = cr.StreamingDataset(tbl, global_batch_size=20, num_splits=5, format="numpy")
    assert ds.stats() == {}
    it = iter(ds)
    next(it)
    live = ds.stats()
    assert live["steps"] >= 1  # small steps cross from Go several at a time
    assert live["rows"] == 20 * live["steps"]
    assert live["requests"] >= 1
    assert live["bytes_read"] > 0
    for _ in it:
        pass
    done = ds.stats()  # kept after the stream closed
    assert done["steps"] == ds.steps_per_epoch
    assert done["rows"] == 500
    assert done["row_groups"] == done["requests"] >= 2  # one request per row group
    assert done["kept_rows"] == 500
    assert done["decoded_bytes"] > 0
    assert done["stall_ns"] >= 0
