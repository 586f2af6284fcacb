"""The benchmark harness (bench/run.py) runs end to end at tiny sizes, so that it
cannot rot: the object-store benchmark, and the loader benchmark with croupier
(local files and the S3 server) and the pyarrow baseline. Peer libraries are
not needed; one is reported as not installed to check that a missing peer is
skipped, and said so, rather than failing the run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def table_row(text: str, reader: str, order: str) -> list[str]:
    """The cells of the markdown table row of ``reader`` in ``order``."""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 2 and cells[0] == reader and cells[1] == order:
            return cells[2:]
    raise AssertionError(f"no row {reader!r} / {order!r} in:\n{text}")


@pytest.mark.slow
def test_harness_smoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import readers
    import run

    installed = readers.missing
    monkeypatch.setattr(
        readers,
        "missing",
        lambda kind: "pylance not installed" if kind.name == "lance-batch" else installed(kind),
    )
    out = tmp_path / "RESULTS.md"
    rc = run.main(
        [
            "--quick",
            "--only=objstore,loader",
            f"--out={out}",
            f"--plots={tmp_path / 'plots'}",
            # loader_throughput.py's own flags, after --quick's
            "--readers=pyarrow,croupier,lance-batch",
            "--orders=full",
            "--storage=s3",
            "--seconds=0.5",
            f"--cache={tmp_path / 'cache'}",
        ]
    )
    assert rc == 0
    text = out.read_text()

    objstore = text[text.index("## Object-store throughput") : text.index("## Loader")]
    for store in ("file", "mem", "s3", "s3+50ms"):
        row = rf"^\| {re.escape(store)} \| 64 KiB \| [\d,]+ \| [\d,]+ \|$"
        assert re.search(row, objstore, re.M), store
    assert "CROUPIER_BENCH_S3_URI not set" in objstore

    loader = text[text.index("## Loader throughput") :]
    base = table_row(loader, "pyarrow iter_batches → torch (baseline)", "sequential")
    local = table_row(loader, "croupier", "full shuffle")
    s3 = table_row(loader, "croupier, S3", "full shuffle")
    # columns: samples/s, vs baseline, MB/s, read ÷ delivered, peak RSS, first batch,
    # resume, position~id, row groups / batch, epoch read
    assert base[1] == "1.00"
    assert float(base[7]) > 0.99  # the baseline reads in stored order
    for row in (local, s3):
        assert float(row[0].replace(",", "")) > 0
        assert abs(float(row[7])) < 0.2  # a full shuffle leaves no trace of the stored order
        assert float(row[8]) > 1  # and a batch holds rows of several row groups
        assert row[6] != "—"  # resumed,
        assert "wrong batch" not in row[6]  # at the right step
    # Bytes read are counted: zstd Parquet holds these rows in about half their Arrow
    # bytes, and neither reader reads the files many times over.
    for row in (base, local, s3):
        assert 0.2 < float(row[3]) < 3, row
    skipped = table_row(loader, "Lance LanceDataset", "batch order shuffle")
    assert skipped[0] == "skipped: pylance not installed"


def test_tokens_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tokens part writes its section: token-budget steps hold at most the
    budget, packed steps carry no padding."""
    monkeypatch.syspath_prepend(str(BENCH))
    import tokens

    out = tmp_path / "RESULTS.md"
    assert tokens.main(["--rows=1500", "--imbalance-steps=3", f"--out={out}"]) == 0
    text = out.read_text()
    assert "## Token-budget steps" in text
    row = next(line for line in text.splitlines() if "T=16384, packed" in line)
    # name, steps, mean, CV, min, max, max ÷ min, padding share, rate
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    assert int(cells[5].replace(",", "")) <= 16384
    assert cells[7] == "0.0%"


def test_mixture_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mixture part writes its section: one source and a mixture of three,
    each with its rates, peak memory and the ratio (the part itself checks that
    both read every row once)."""
    monkeypatch.syspath_prepend(str(BENCH))
    import tokens

    out = tmp_path / "RESULTS.md"
    assert tokens.main(["--part=mixture", "--rows=1500", "--repeats=1", f"--out={out}"]) == 0
    text = out.read_text()
    assert "## Mixtures" in text
    for name in ("one source", "mixture of 3 sources"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
        cells = [c.strip() for c in row.strip().strip("|").split("|")]
        assert all(float(c.replace(",", "")) > 0 for c in cells[1:4]), row
    assert re.search(r"Mixture ÷ one source: rows/s \d+\.\d\d, tokens/s \d+\.\d\d", text)


def test_follow_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The follow part writes its section: both reads deal the same rows, and the
    latency of each poll interval."""
    monkeypatch.syspath_prepend(str(BENCH))
    import follow

    out = tmp_path / "RESULTS.md"
    argv = ["--rows=2000", "--versions=8", "--rows-per-round=500", "--repeats=1", "--commits=3",
            "--gap=0.01", f"--out={out}"]  # fmt: skip
    assert follow.main(argv) == 0
    text = out.read_text()
    assert "## Following a growing table" in text

    def cells(first: str) -> list[str]:
        line = next(line for line in text.splitlines() if line.startswith(f"| {first} |"))
        return [c.strip() for c in line.strip().strip("|").split("|")][1:]

    # Pinned: 2,000 rows in 7 full steps of 256. Following: rounds of two versions
    # of 250 rows (500 rows, then 494 + 250 with the carry, ...) deal 1, 2, 2 and 2 steps.
    assert cells("pinned")[0] == cells("following")[0] == "1,792"
    assert re.search(r"Following ÷ pinned, rows/s: \d+\.\d\d", text)
    for poll in ("20 ms", "200 ms"):
        p50, p90, most = (float(c) for c in cells(poll))
        assert p50 <= p90 <= most


@pytest.mark.slow
def test_distant_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The distant part writes its section: croupier on local files and over the
    S3 server with the server's count of GETs, its ratio to local files, the
    cache's epochs (or "n/a" where open_table takes no cache_dir), and a peer
    whose library is missing reported as skipped."""
    monkeypatch.syspath_prepend(str(BENCH))
    import distant
    import readers

    monkeypatch.setattr(readers, "missing", lambda kind: "pylance not installed")
    out = tmp_path / "RESULTS.md"
    argv = ["--rows=32768", "--forms=croupier", "--orders=sequential", "--latencies=0",
            "--cache-latencies=0", "--ratios=4", "--seconds=60", "--peers=lancedb",
            f"--cache={tmp_path / 'cache'}", f"--out={out}"]  # fmt: skip
    assert distant.main(argv) == 0
    text = out.read_text()
    assert "## Distant store" in text

    def rows(first: str, *more: str) -> list[list[str]]:
        head = f"| {' | '.join((first, *more))} |"
        found = [line for line in text.splitlines() if line.startswith(head)]
        assert found, f"no row {head!r} in:\n{text}"
        return [[c.strip() for c in line.strip().strip("|").split("|")] for line in found]

    # table, order, budget, store, first batch, rows/s, ÷ local, rows/s after, ÷ local,
    # GETs / 1,000 rows, croupier requests / 1,000 rows, fetched ÷ delivered, ...
    [local] = rows("croupier table", "sequential", "24.2", "local files")
    # the read in the table of every read, then in the table of the cache's epochs
    [s3, cache] = rows("croupier table", "sequential", "24.2", "S3 +0 ms")
    assert local[6] == "1.00"
    assert local[9] == "—"
    assert float(s3[5].replace(",", "")) > 0
    assert float(s3[6]) > 0
    assert float(s3[9].replace(",", "")) > 0  # the server counted the GETs of the read
    # a sequential read of the whole epoch (no read stops at --seconds) fetches
    # each page about once; a read cut short by time has fetched ahead of what it
    # delivered, more so on a loaded machine
    assert 0.5 < float(s3[11]) < 3
    headline = rows("croupier table", "sequential", "24.2")[0]
    assert headline[3] == s3[8]  # from the first batch on, S3 ÷ local
    if distant.cache_missing():
        assert cache[4] == "n/a: open_table takes no cache_dir"
    else:  # the second epoch reads what the first fetched from the cache
        assert float(cache[11].replace(",", "")) < float(cache[6].replace(",", ""))
    for store in ("local files", "S3 +0 ms"):
        [skipped] = rows("LanceDB StreamingDataset", "Lance", "sequential", store)
        assert skipped[5] == "skipped: pylance not installed"
