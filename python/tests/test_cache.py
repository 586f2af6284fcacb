"""The disk cache of blocks read from a remote store, from Python.

Tables on the local S3-compatible server (``internal/s3serve``) are opened
twice with one cache folder: the second epoch reads every byte from disk, in
this process, through a pickled copy of the table and in a DataLoader worker.
"""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import write_files

import croupier as cr

pytestmark = pytest.mark.slow  # builds and starts the S3 server

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def table_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A plain Parquet dataset of 1000 rows on the S3 server."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("needs the Go toolchain")
    folder = tmp_path_factory.mktemp("s3")
    binary = folder / "s3serve"
    subprocess.run([go, "build", "-o", str(binary), "./internal/s3serve"], cwd=REPO, check=True,
                   timeout=600, capture_output=True)  # fmt: skip
    write_files(folder / "table", [400, 350, 250])
    proc = subprocess.Popen(
        [str(binary), f"table={folder / 'table'}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    assert proc.stdin is not None
    try:
        yield json.loads(proc.stdout.readline())["uris"]["table"]
    finally:
        proc.stdin.close()  # s3serve exits when its standard input closes
        proc.wait(timeout=30)


def epoch(source: cr.Table | cr.DataLoader) -> tuple[list[int], dict[str, int]]:
    """The ids of one epoch over ``source`` and the reads' counters."""
    if isinstance(source, cr.Table):
        ds = cr.StreamingDataset(source, global_batch_size=50, num_splits=5, format="numpy")
        ids = [int(i) for batch in ds for i in batch["id"]]
        return sorted(ids), ds.stats()
    ids = [int(i) for batch in source for i in batch["id"]]
    return sorted(ids), source.dataset.stats()


def test_second_open_reads_the_disk(table_uri: str, tmp_path: Path) -> None:
    """open_table twice with one cache_dir: the second epoch asks the store for
    nothing and counts its hits."""
    cache = str(tmp_path / "blocks")
    ids, first = epoch(cr.open_table(table_uri, cache_dir=cache))
    assert ids == list(range(1000))
    # The first epoch reads from the store, or from blocks its table's open
    # fetched with the footers (a small file lies in the footer's blocks).
    assert first["requests"] + first["cache_hits"] > 0, first
    again, second = epoch(cr.open_table(table_uri, cache_dir=cache))
    assert again == ids
    assert (second["requests"], second["bytes_read"]) == (0, 0), second
    assert (second["cache_hits"] > 0, second["cache_hit_bytes"] > 0) == (True, True), second
    assert list((tmp_path / "blocks").glob("*.seg"))


def test_cache_off(table_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """cache_dir="" and CROUPIER_CACHE_DIR="" read every byte from the store."""
    for table in (
        lambda: cr.open_table(table_uri, cache_dir=""),
        lambda: cr.open_table(table_uri),
    ):
        monkeypatch.setenv("CROUPIER_CACHE_DIR", "")
        for _ in range(2):
            _, stats = epoch(table())
            assert (stats["requests"] > 0, stats["cache_hits"]) == (True, 0), stats


def test_environment_sets_the_cache(
    table_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CROUPIER_CACHE_DIR and CROUPIER_CACHE_BYTES, set after the library was
    loaded, are the defaults of open_table; without the first, blocks go under
    $XDG_CACHE_HOME/croupier/blocks."""
    monkeypatch.setenv("CROUPIER_CACHE_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("CROUPIER_CACHE_BYTES", str(1 << 30))
    table = cr.open_table(table_uri)
    assert table._cache == {"cache_dir": str(tmp_path / "env"), "cache_bytes": 1 << 30}
    epoch(table)
    assert list((tmp_path / "env").glob("*.seg"))
    monkeypatch.delenv("CROUPIER_CACHE_DIR")
    monkeypatch.delenv("CROUPIER_CACHE_BYTES")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    epoch(cr.open_table(table_uri))
    assert list((tmp_path / "xdg" / "croupier" / "blocks").glob("*.seg"))
    monkeypatch.setenv("CROUPIER_CACHE_BYTES", "lots")
    with pytest.raises(cr.InvalidArgumentError, match="CROUPIER_CACHE_BYTES"):
        cr.open_table(table_uri)


def test_copies_keep_the_cache(table_uri: str, tmp_path: Path) -> None:
    """A pickled table, and the dataset a DataLoader worker reads, read through
    the cache the table was opened with: their epochs after a first ask the
    store for nothing."""
    table = cr.open_table(table_uri, cache_dir=str(tmp_path / "blocks"))
    ids, _ = epoch(table)
    copy: Any = pickle.loads(pickle.dumps(table))
    got, stats = epoch(copy)
    assert got == ids
    assert (stats["requests"], stats["cache_hits"] > 0) == (0, True), stats
    ds = cr.StreamingDataset(table, global_batch_size=50, num_splits=5, format="torch")
    loader = cr.DataLoader(ds, num_workers=1, in_process=False)
    got, stats = epoch(loader)
    assert got == ids
    assert (stats["requests"], stats["cache_hits"] > 0) == (0, True), stats


def test_permutations_keep_the_cache(table_uri: str, tmp_path: Path) -> None:
    """open_permutations reads its table through the cache it is given, and so
    does its pickled copy."""
    cache = str(tmp_path / "blocks")
    perm_uri = f"file://{tmp_path}/perm"
    table = cr.open_table(table_uri, cache_dir=cache)
    epoch(table)
    cr.PermutationBuilder(table).shuffle(seed=3).persist(perm_uri, progress=False)
    for perms in (
        cr.open_permutations(perm_uri, cache_dir=cache),
        pickle.loads(pickle.dumps(cr.open_permutations(perm_uri, cache_dir=cache))),
    ):
        ds = cr.StreamingDataset(perms[0], global_batch_size=50, num_splits=5, format="numpy")
        assert sorted(int(i) for batch in ds for i in batch["id"]) == list(range(1000))
        stats = ds.stats()
        assert (stats["requests"], stats["cache_hits"] > 0) == (0, True), stats
