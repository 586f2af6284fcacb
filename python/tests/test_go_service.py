"""examples/go-service serves, over HTTP, the same batches as StreamingDataset.

The test builds the service with the local Go toolchain, runs it on a free
port of 127.0.0.1 against a table written by pyarrow, and compares what
``/batches`` streams with the dataset's batches for the same rank and world size.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc
import pytest
from conftest import uri, write_files

import croupier as cr

pytestmark = pytest.mark.slow  # builds and starts the service

REPO = Path(__file__).resolve().parents[2]
G, S, SEED = 12, 6, 99
TIMEOUT = 30.0  # seconds, for each HTTP request and for the service to start


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None:
        pytest.skip("needs the Go toolchain")
    out = tmp_path_factory.mktemp("bin") / "go-service"
    subprocess.run(
        [go, "build", "-o", str(out), "./examples/go-service"],
        cwd=REPO,
        check=True,
        timeout=300,
        capture_output=True,
    )
    return out


@pytest.fixture
def service(binary: Path, tmp_path: Path) -> Iterator[tuple[str, cr.Permutation]]:
    """The service dealing a filtered, shuffled permutation split; yields (base URL, split)."""
    write_files(tmp_path / "table", [150, 90, 120])
    perms = (
        cr.PermutationBuilder(cr.open_table(uri(tmp_path / "table")))
        .filter("id % 4 != 1")
        .split_hash(["id"], [3, 1], split_names=["train", "val"])
        .shuffle(seed=SEED)
        .persist(uri(tmp_path / "perm"), progress=False)
    )
    port = free_port()
    args = [str(binary), "--perm", perms.uri, "--split", "train"]
    args += ["--global-batch-size", str(G), "--num-splits", str(S), "--shuffle-seed", "5"]
    args += ["--addr", f"127.0.0.1:{port}"]
    log = tmp_path / "service.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + TIMEOUT
        while True:
            try:
                with urllib.request.urlopen(base + "/info", timeout=1):
                    break
            except (urllib.error.URLError, ConnectionError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("service did not start: " + log.read_text()) from None
                time.sleep(0.1)
        yield base, perms["train"]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        perms.close()


def fetch(base: str, **query: int) -> list[pa.RecordBatch]:
    """GET /batches?... read with pyarrow's IPC stream reader."""
    qs = "&".join(f"{k}={v}" for k, v in query.items())
    with urllib.request.urlopen(f"{base}/batches?{qs}", timeout=TIMEOUT) as resp:
        assert resp.headers["Content-Type"] == "application/vnd.apache.arrow.stream"
        return list(pa.ipc.open_stream(resp))


def dataset_ids(split: cr.Permutation, rank: int, world_size: int, epoch: int) -> list[list[int]]:
    ds = cr.StreamingDataset(
        split,
        global_batch_size=G,
        num_splits=S,
        shuffle_seed=5,
        epoch=epoch,
        rank=rank,
        world_size=world_size,
        columns=["id"],
        format="arrow",
    )
    with ds:
        return [batch.column("id").to_pylist() for batch in ds]


def test_info(service: tuple[str, cr.Permutation]) -> None:
    base, split = service
    with urllib.request.urlopen(base + "/info", timeout=TIMEOUT) as resp:
        info = json.load(resp)
    ds = cr.StreamingDataset(split, global_batch_size=G, num_splits=S, shuffle_seed=5)
    assert info["steps_per_epoch"] == ds.steps_per_epoch
    assert info["num_rows"] == len(split)
    assert info["permutation_id"] == split.id
    assert info["table_version"] == str(split.permutations.table.version)
    ds.close()


@pytest.mark.parametrize(("rank", "world_size", "epoch"), [(0, 1, 0), (1, 2, 0), (2, 3, 1)])
def test_batches_match_dataset(
    service: tuple[str, cr.Permutation], rank: int, world_size: int, epoch: int
) -> None:
    base, split = service
    batches = fetch(base, rank=rank, world_size=world_size, epoch=epoch)
    want = dataset_ids(split, rank, world_size, epoch)
    assert [b.column("_step")[0].as_py() for b in batches] == list(range(len(want)))
    assert [b.column("id").to_pylist() for b in batches] == want


def test_resume_from_step(service: tuple[str, cr.Permutation]) -> None:
    base, split = service
    want = dataset_ids(split, 1, 3, 0)
    batches = fetch(base, rank=1, world_size=3, start_step=4, steps=3)
    assert [b.column("_step")[0].as_py() for b in batches] == [4, 5, 6]
    assert [b.column("id").to_pylist() for b in batches] == want[4:7]


def test_bad_parameters(service: tuple[str, cr.Permutation]) -> None:
    base, _ = service
    with pytest.raises(urllib.error.HTTPError) as err:
        fetch(base, rank=0, world_size=4)  # 4 does not divide num_splits=6
    assert err.value.code == 400
    assert "4" in err.value.read().decode()
