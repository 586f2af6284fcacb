"""croupier tables from Python: create, append, versions, time travel, retention, catalog."""

from __future__ import annotations

import datetime
import json
import multiprocessing
import os
import pickle
import random
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import croupier as cr


def rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "tokens": pa.array([[i, i + 1] for i in range(start, start + n)], pa.list_(pa.int32())),
        }
    )


def ids_at(uri: str, version: int | None = None) -> list[int]:
    tbl = cr.open_table(uri, version)
    ds = cr.StreamingDataset(tbl, global_batch_size=1, num_splits=1, columns=["id"], format="arrow")
    return sorted(i for b in ds for i in b.column("id").to_pylist())


def test_create_append_time_travel(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/t"
    tbl = cr.create_table(uri, rows(0, 50))
    assert tbl.version == 1
    assert tbl.num_rows == 50
    assert tbl.append(rows(50, 20)) == 2
    assert tbl.append(iter(rows(70, 5).to_batches())) == 3
    assert tbl.versions() == [1, 2, 3]
    assert tbl.version == 1  # the object stays pinned at its own version
    assert ids_at(uri) == list(range(75))
    assert ids_at(uri, 2) == list(range(70))
    assert ids_at(uri, 1) == list(range(50))
    assert cr.open_table(uri).schema.names == ["id", "tokens"]


class _CStreamOnly:
    """Rows offered only through the Arrow PyCapsule interface, as polars and
    DuckDB frames offer theirs."""

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self._table.__arrow_c_stream__(requested_schema)


def test_create_and_append_from_arrow_c_streams(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/t"
    tbl = cr.create_table(uri, _CStreamOnly(rows(0, 30)))
    assert tbl.num_rows == 30
    assert tbl.append(_CStreamOnly(rows(30, 12))) == 2
    assert ids_at(uri) == list(range(42))
    assert cr.open_table(uri).schema == rows(0, 1).schema


def test_history_and_empty_appends(tmp_path: Path) -> None:
    """Each version says when it was committed and its rows; an append of no
    rows makes no version and says so."""
    before = datetime.datetime.now(datetime.timezone.utc)
    tbl = cr.create_table(tmp_path / "t", rows(0, 50))
    assert tbl.append(rows(50, 20)) == 2
    with pytest.raises(cr.InvalidArgumentError, match=r"no rows to append.*stays at version 2"):
        tbl.append(rows(70, 0))
    after = datetime.datetime.now(datetime.timezone.utc)
    history = tbl.history()
    assert [(v["version"], v["num_rows"], v["added_rows"]) for v in history] == [
        (1, 50, 50),
        (2, 70, 20),
    ]
    committed = [v["committed"] for v in history]
    assert before - datetime.timedelta(seconds=1) <= committed[0] <= committed[1] <= after
    assert tbl.versions() == [1, 2]


@pytest.mark.parametrize("length", [4010, 65536])
def test_long_column_names(tmp_path: Path, length: int) -> None:
    name = "c" * length
    values = [f"value {i}" for i in range(30)]
    data = pa.table({"id": pa.array(range(30), pa.int64()), name: values})
    tbl = cr.create_table((tmp_path / "a").as_uri(), data, row_group_rows=10)
    again = cr.rewrite(tbl, (tmp_path / "b").as_uri(), columns=[name])
    got = again.take([29, 0])
    assert got.column_names == [name]
    assert got[name].to_pylist() == ["value 29", "value 0"]


def test_append_errors(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/t"
    tbl = cr.create_table(uri, rows(0, 5))
    with pytest.raises(cr.InvalidArgumentError, match='"tokens"'):
        tbl.append(pa.table({"id": pa.array([1], pa.int64())}))
    with pytest.raises(cr.InvalidArgumentError, match="id"):
        tbl.append(
            pa.table({"id": pa.array(["x"]), "tokens": pa.array([[1]], pa.list_(pa.int32()))})
        )
    assert tbl.versions() == [1]  # nothing was committed
    with pytest.raises(cr.AlreadyExistsError, match=str(tmp_path)):
        cr.create_table(uri, rows(0, 5))
    with pytest.raises(cr.NotFoundError, match="version 9"):
        cr.open_table(uri, 9)


def _append_many(uri: str, writer: int, count: int) -> None:
    tbl = cr.open_table(uri)
    for k in range(count):
        tbl.append(rows(1000 * (writer + 1) + k * 10, 10))


def test_concurrent_appends_from_processes(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/t"
    cr.create_table(uri, rows(0, 10))
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append_many, args=(uri, w, 5)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert cr.open_table(uri).versions() == list(range(1, 22))
    want = list(range(10)) + [
        1000 * (w + 1) + k * 10 + i for w in range(4) for k in range(5) for i in range(10)
    ]
    assert ids_at(uri) == sorted(want)


def test_cleanup_and_permutation_of_removed_version(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/t"
    tbl = cr.create_table(uri, rows(0, 40))
    perms = cr.PermutationBuilder(tbl).persist(f"file://{tmp_path}/p", progress=False)
    assert len(perms["all"]) == 40
    tbl.append(rows(40, 10))
    tbl.append(rows(50, 10))
    result = cr.cleanup(uri, keep_last=1, grace=0)
    assert result["deleted_versions"] == [1, 2]
    assert result["warnings"] == []  # file:// has no uploads to list
    assert cr.open_table(uri).versions() == [3]
    assert ids_at(uri) == list(range(60))  # the kept version still reads every row
    with pytest.raises(cr.NotFoundError):
        cr.open_table(uri, 1)
    with pytest.raises(cr.ChangedError, match="version 1 no longer exists"):
        cr.open_permutations(f"file://{tmp_path}/p")


def test_catalog(tmp_path: Path) -> None:
    catalog = str(tmp_path / "catalog.db")
    cr.register("rollouts", "file:///data/rollouts", catalog=catalog)
    assert cr.lookup("rollouts", catalog=catalog) == "file:///data/rollouts"
    with pytest.raises(cr.NotFoundError, match="nope"):
        cr.lookup("nope", catalog=catalog)
    uri = f"file://{tmp_path}/t"
    cr.create_table(uri, rows(0, 5))
    first = cr.open_table(uri, catalog=catalog)
    again = cr.open_table(uri, catalog=catalog)  # served from the catalog's cache
    assert (first.version, first.num_rows) == (again.version, again.num_rows) == (1, 5)


def test_truncated_catalog_is_a_cold_open(tmp_path: Path) -> None:
    """A catalog file cut short (a full disk, a partial copy of ~/.cache) makes
    the next open cold, never a crash: bbolt maps the file, and reading a page
    past its end faulted with SIGBUS. The file is set aside and started anew."""
    catalog = tmp_path / "catalog.db"
    uri = f"file://{tmp_path}/t"
    cr.create_table(uri, rows(0, 5))
    cr.register("t", uri, catalog=str(catalog))
    for i in range(40):  # a catalog of many pages
        cr.register(f"other-{i}-" + "x" * 500, uri, catalog=str(catalog))
    assert cr.open_table(uri, catalog=str(catalog)).num_rows == 5
    assert catalog.stat().st_size > 16 << 10
    os.truncate(catalog, 8 << 10)  # its two meta pages: the root page lies past the end
    again = cr.open_table(uri, catalog=str(catalog))
    assert (again.version, again.num_rows) == (1, 5)
    assert len(list(tmp_path.glob("catalog.db.damaged-*"))) == 1
    with pytest.raises(cr.NotFoundError, match='"t"'):
        cr.lookup("t", catalog=str(catalog))  # the names were in the damaged file


def test_store_ignoring_conditional_writes_is_refused(tmp_path: Path) -> None:
    """On an S3 server that ignores If-None-Match, create_table and append refuse
    to commit, naming the override, and commit with trust_conditional_writes=True;
    rewrite takes the override too."""
    repo = Path(__file__).resolve().parents[2]
    binary = tmp_path / "s3serve"
    subprocess.run(["go", "build", "-o", str(binary), "./internal/s3serve"], cwd=repo, check=True)
    (tmp_path / "empty").mkdir()
    # A bucket of its own: a store that passed the probe is trusted for the
    # rest of the process, and an earlier test's server may have had this
    # one's port.
    bucket = f"ignoring-{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [str(binary), "-ignore-conditional-writes", "-bucket", bucket, f"t={tmp_path / 'empty'}"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        table_uri = json.loads(proc.stdout.readline())["uris"]["t"]
        with pytest.raises(cr.InvalidArgumentError, match="trust_conditional_writes=True"):
            cr.create_table(table_uri, rows(0, 10))
        tbl = cr.create_table(table_uri, rows(0, 10), trust_conditional_writes=True)
        with pytest.raises(cr.InvalidArgumentError, match="ignores conditional writes"):
            tbl.append(rows(10, 5))
        assert tbl.append(rows(10, 5), trust_conditional_writes=True) == 2
        assert cr.open_table(table_uri).num_rows == 15
        copy = cr.rewrite(tbl, f"file://{tmp_path}/c", trust_conditional_writes=True)
        assert copy.num_rows == 10
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


def _random_rows(seed: int) -> pa.Table:
    """Incompressible rows: tables from two seeds have data files of one size."""
    return pa.table({"x": pa.array(random.Random(seed).getrandbits(63) for _ in range(1000))})


def _read_everything(tbl: cr.Table) -> None:
    for _ in cr.StreamingDataset(tbl, global_batch_size=100, num_splits=1, format="arrow"):
        pass


def test_same_size_rewrite_is_changed(tmp_path: Path) -> None:
    """A data file replaced by one of the same size and modification time, to the
    nanosecond, fails every read path with ChangedError naming it."""
    table_uri = f"file://{tmp_path}/t"
    pinned = cr.create_table(table_uri, _random_rows(1))
    cr.create_table(f"file://{tmp_path}/other", _random_rows(2)).close()
    (victim,) = (tmp_path / "t" / "data").glob("*.parquet")
    (replacement,) = (tmp_path / "other" / "data").glob("*.parquet")
    assert victim.stat().st_size == replacement.stat().st_size, "the test needs files of one size"
    pickled = pickle.dumps(pinned)

    st = victim.stat()
    tmp = victim.with_suffix(".new")
    shutil.copyfile(replacement, tmp)
    os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(tmp, victim)
    assert victim.stat().st_mtime_ns == st.st_mtime_ns

    opens = {
        "open": lambda: cr.open_table(table_uri),
        "version": lambda: cr.open_table(table_uri, version=1),
        "unpickled pin": lambda: pickle.loads(pickled),
    }
    for path, reopen in opens.items():
        with pytest.raises(cr.ChangedError, match=victim.name) as info:
            _read_everything(reopen())
        # An open from the manifest takes the file found, and finds that its
        # footer is not the one the manifest records; a pin names its file.
        said = "not the file its table's manifest names"
        if path == "unpickled pin":
            said = "pinned file changed"
        assert said in str(info.value), path


def _dealt(
    tbl: cr.Table, steps: int | None = None, state: dict[str, Any] | None = None
) -> tuple[list[list[int]], dict[str, Any]]:
    """The batches of column x a shuffled run over tbl deals (the first steps,
    or all), from state where given, and the run's state after them."""
    ds = cr.StreamingDataset(
        tbl, global_batch_size=300, num_splits=1, shuffle_seed=7, columns=["x"], format="arrow"
    )
    if state is not None:
        ds.load_state_dict(state)
    out = []
    for batch in ds:
        out.append(batch.column("x").to_pylist())
        if steps is not None and len(out) == steps:
            break
    return out, ds.state_dict()


def test_copied_table_reads_as_the_original(tmp_path: Path) -> None:
    """A croupier table staged elsewhere on local disk by cp -a, cp -r or a copy
    of the bytes alone (shutil.copytree with shutil.copy) reads as the original:
    same version, same table id, same batches, unpickled too, and a run
    checkpointed on the original resumes on the copy. A copy with one byte of a page changed,
    its size kept, is refused naming the file; a file of an open copy
    rewritten in place is refused too."""
    src = tmp_path / "orig"
    orig = cr.create_table(f"file://{src}", _random_rows(1), row_group_rows=250)
    orig.append(_random_rows(2))
    orig = cr.open_table(f"file://{src}")
    want, want_state = _dealt(orig)
    head, state = _dealt(orig, steps=2)
    copies = {
        "cp -a": lambda dst: subprocess.run(["cp", "-a", str(src), str(dst)], check=True),
        "cp -r": lambda dst: subprocess.run(["cp", "-r", str(src), str(dst)], check=True),
        "bytes only": lambda dst: shutil.copytree(src, dst, copy_function=shutil.copy),
    }
    for name, copy in copies.items():
        dst = tmp_path / name.replace(" ", "_")
        copy(dst)
        tbl = cr.open_table(f"file://{dst}")
        assert (tbl.version, tbl.versions()) == (orig.version, orig.versions()), name
        got, got_state = _dealt(tbl)
        assert got == want, name
        assert _dealt(pickle.loads(pickle.dumps(tbl)))[0] == want, name  # as workers reopen it
        assert got_state["table_id"] == want_state["table_id"], name
        rest, _ = _dealt(tbl, state=state)
        assert head + rest == want, name
        assert cr.open_table(f"file://{dst}", version=1).num_rows == 1000, name

    changed = tmp_path / "changed"
    shutil.copytree(src, changed, copy_function=shutil.copy)
    path = min((changed / "data").glob("*.parquet"))
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(0)
    data = bytearray(path.read_bytes())
    last = chunk.data_page_offset + chunk.total_compressed_size - 1  # the last byte of a page
    data[last] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(cr.CorruptError, match=path.name) as info:
        _dealt(cr.open_table(f"file://{changed}"))
    assert "CRC" in str(info.value)

    dst = tmp_path / "bytes_only"
    tbl = cr.open_table(f"file://{dst}")
    assert _dealt(tbl, steps=1)[0] == want[:1]
    for path in (dst / "data").glob("*.parquet"):
        st = path.stat()
        path.write_bytes(path.read_bytes())
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    with pytest.raises(cr.ChangedError, match="pinned file changed"):
        _dealt(tbl)


def test_data_files_carry_standard_page_crcs(tmp_path: Path) -> None:
    """pyarrow, checking page CRCs as it reads, reads croupier's data files to
    the rows written, and finds a flipped bit in one of their pages."""
    uri = f"file://{tmp_path}/t"
    data = rows(0, 3000)
    cr.create_table(uri, data, row_group_rows=1000, page_bytes=1024).close()
    (path,) = (tmp_path / "t" / "data").glob("*.parquet")
    read = pq.read_table(path, page_checksum_verification=True)
    assert read.equals(data)
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == 3
    chunk = meta.row_group(1).column(0)
    # A byte in the middle of the chunk, past its first page header: in a page.
    at = chunk.data_page_offset + chunk.total_compressed_size // 2
    raw = bytearray(path.read_bytes())
    raw[at] ^= 0x01
    path.write_bytes(bytes(raw))
    with pytest.raises(OSError, match="CRC"):
        pq.read_table(path, page_checksum_verification=True)


def test_compression(tmp_path: Path) -> None:
    """``compression`` names the codec of every page a create or an append
    writes, lz4 when not given; pyarrow reads the files back to the rows
    written; an unknown name is refused before anything is written."""
    uri = f"file://{tmp_path}/t"
    tbl = cr.create_table(uri, rows(0, 3000), row_group_rows=1000, compression="zstd")
    assert tbl.append(rows(3000, 500), compression="none") == 2
    tbl.close()
    with cr.open_table(uri) as tbl:
        assert tbl.append(rows(3500, 250)) == 3
    codecs = {}
    for path in (tmp_path / "t" / "data").glob("*.parquet"):
        meta = pq.ParquetFile(path).metadata
        codecs[meta.num_rows] = {
            meta.row_group(g).column(c).compression
            for g in range(meta.num_row_groups)
            for c in range(meta.num_columns)
        }
    # pyarrow names Parquet's LZ4_RAW codec "LZ4".
    assert codecs == {3000: {"ZSTD"}, 500: {"UNCOMPRESSED"}, 250: {"LZ4"}}
    assert pq.read_table(tmp_path / "t" / "data").sort_by("id").equals(rows(0, 3750))
    with pytest.raises(cr.InvalidArgumentError, match='compression "gzip": use one of'):
        cr.create_table(f"file://{tmp_path}/bad", rows(0, 10), compression="gzip")
    assert not (tmp_path / "bad").exists()
