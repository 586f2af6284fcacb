"""Rewriting a plain Parquet dataset into a croupier table laid out for shuffled reads."""

from __future__ import annotations

import os
import signal
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import rows, uri

import croupier as cr


def export(folder: Path, file_sizes: list[int]) -> str:
    """A dataset as pyarrow writes an export: row groups of 16,384 rows, no page index."""
    folder.mkdir()
    start = 0
    for i, n in enumerate(file_sizes):
        name = f"train-{i:05d}-of-{len(file_sizes):05d}.parquet"
        pq.write_table(rows(start, n), folder / name, row_group_size=16384)
        start += n
    return uri(folder)


def data_file(table_dir: Path) -> pq.ParquetFile:
    """The one data file a rewrite writes."""
    (path,) = (table_dir / "data").glob("*.parquet")
    return pq.ParquetFile(path)


def test_rewrite(tmp_path: Path) -> None:
    src = export(tmp_path / "export", [17000, 5000])
    calls: list[tuple[int, int, int, int]] = []
    tbl = cr.rewrite(
        src,
        uri(tmp_path / "tbl"),
        row_group_rows=4096,
        page_bytes=8192,
        progress=lambda *p: calls.append(p),
    )
    assert (tbl.version, tbl.num_rows, tbl.num_files) == (1, 22000, 1)

    f = data_file(tmp_path / "tbl")
    assert f.read().equals(pq.read_table(tmp_path / "export"))  # same rows, in row id order
    md = f.metadata
    assert [md.row_group(g).num_rows for g in range(md.num_row_groups)] == [4096] * 5 + [1520]
    for g in range(md.num_row_groups):
        for c in range(md.num_columns):
            col = md.row_group(g).column(c)
            assert col.has_offset_index
            assert col.has_column_index
            assert col.compression == "LZ4"  # the default, LZ4_RAW, as pyarrow names it

    # One report per source row group (16,384 + 616 rows, then 5,000), growing to the totals.
    assert [c[0] for c in calls] == [16384, 17000, 22000]
    assert all(c[1] == 22000 for c in calls)
    done_bytes = [c[2] for c in calls]
    assert done_bytes == sorted(done_bytes)
    assert len(set(done_bytes)) == 3
    assert done_bytes[-1] == calls[0][3] > 0

    # A projection, and a croupier table as the source.
    projected = cr.rewrite(
        tbl, uri(tmp_path / "projected"), columns=["text", "id"], compression="zstd"
    )
    assert projected.schema.names == ["text", "id"]
    want = pq.read_table(tmp_path / "export", columns=["text", "id"])
    f = data_file(tmp_path / "projected")
    assert f.read().equals(want)
    assert f.metadata.row_group(0).column(0).compression == "ZSTD"

    with pytest.raises(cr.AlreadyExistsError, match="exists"):
        cr.rewrite(src, tbl.uri)
    with pytest.raises(cr.InvalidArgumentError, match='"nope"'):
        cr.rewrite(src, uri(tmp_path / "bad"), columns=["id", "nope"])


def test_progress_display(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``progress=True`` shows the rows done on stderr (tqdm when installed)."""
    src = export(tmp_path / "export", [17000])
    cr.rewrite(src, uri(tmp_path / "tbl"), progress=True)
    err = capsys.readouterr().err
    assert "rewrite" in err
    assert "17000/17000" in err or "17.0k/17.0k" in err


def test_interrupted_rewrite_leaves_no_version(tmp_path: Path) -> None:
    src = export(tmp_path / "export", [20000])
    dst = uri(tmp_path / "tbl")

    def interrupt(rows: int, total_rows: int, done_bytes: int, total_bytes: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cr.rewrite(src, dst, progress=interrupt)
    assert cr.open_table(src).num_rows == 20000  # the source is untouched
    with pytest.raises(cr.NotFoundError, match="no committed version"):
        cr.open_table(dst)
    assert not list((tmp_path / "tbl" / "data").glob("*"))

    # The destination takes a rewrite that runs to the end.
    assert cr.rewrite(src, dst).num_rows == 20000


def test_ctrl_c_stops_a_rewrite(tmp_path: Path) -> None:
    """SIGINT during a rewrite raises KeyboardInterrupt in the caller and leaves no version."""
    src = export(tmp_path / "export", [20000])
    dst = uri(tmp_path / "tbl")
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            cr.rewrite(src, dst, progress=lambda *_: os.kill(os.getpid(), signal.SIGINT))
    finally:
        signal.signal(signal.SIGINT, previous)
    with pytest.raises(cr.NotFoundError, match="no committed version"):
        cr.open_table(dst)


def test_columns_must_be_a_sequence(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="sequence of names"):
        cr.rewrite(uri(tmp_path), uri(tmp_path / "tbl"), columns="id")


def shuffled_read(src: cr.Table, perm_uri: str) -> list[warnings.WarningMessage]:
    """The layout warnings of two epochs of a full shuffle of ``src``, 1.5 MiB
    of budget for 3 MB of rows."""
    perms = cr.PermutationBuilder(src).shuffle(seed=5).persist(perm_uri)
    ds = cr.StreamingDataset(
        perms["all"],
        global_batch_size=32,
        num_splits=8,
        format="arrow",
        memory_budget=3 << 19,
        read_ahead=1,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in ds:
            pass
        for _ in ds:  # a second epoch: the dataset has warned already
            pass
    return [w for w in caught if issubclass(w.category, cr.LayoutWarning)]


def test_layout_warning_names_the_rewrite(tmp_path: Path) -> None:
    # One row group in 1 MiB pages without a page index, as pyarrow exports.
    (tmp_path / "export").mkdir()
    pq.write_table(rows(0, 32768), tmp_path / "export" / "part-0.parquet", row_group_size=32768)
    plain = cr.open_table(uri(tmp_path / "export"))
    (warned,) = shuffled_read(plain, uri(tmp_path / "perm-plain"))
    text = str(warned.message)
    for part in (plain.uri, "croupier rewrite", "decoded"):
        assert part in text
    assert warned.filename == __file__  # pointed at the loop that reads

    rewritten = cr.rewrite(plain, uri(tmp_path / "tbl"), memory_budget=1 << 20)
    assert shuffled_read(rewritten, uri(tmp_path / "perm-tbl")) == []


def test_rewrite_memory_budget(tmp_path: Path) -> None:
    src = export(tmp_path / "export", [5000])
    calls: list[tuple[int, int, int, int]] = []
    # About 30 bytes a row: slices of a quarter of 64 KiB hold ~500 rows.
    tbl = cr.rewrite(
        src, uri(tmp_path / "tbl"), memory_budget=64 << 10, progress=lambda *p: calls.append(p)
    )
    assert data_file(tmp_path / "tbl").read().equals(pq.read_table(tmp_path / "export"))
    assert tbl.num_rows == 5000
    assert 5 < len(calls) < 100
    assert calls[-1][:2] == (5000, 5000)
    with pytest.raises(cr.InvalidArgumentError, match="memory_budget"):
        cr.rewrite(src, uri(tmp_path / "tbl2"), memory_budget=0)
