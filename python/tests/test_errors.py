"""Bad input gets a clear exception naming what and where (docs/python.md, "Errors")."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import rows, uri, write_files

import croupier as cr
from croupier.errors import StatusCode, error_class


def test_missing_path(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(cr.NotFoundError, match="nowhere") as info:
        cr.open_table("file://" + str(missing))
    assert isinstance(info.value, FileNotFoundError)
    assert info.value.code == StatusCode.NOT_FOUND


def test_not_parquet(tmp_path: Path) -> None:
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "junk.parquet").write_bytes(b"this is not a parquet file at all" * 10)
    with pytest.raises(cr.CorruptError, match=r"junk\.parquet"):
        cr.open_table("file://" + str(folder))


def test_unknown_column(table_uri: str) -> None:
    tbl = cr.open_table(table_uri)
    with pytest.raises(cr.InvalidArgumentError, match="no_such_column"):
        cr.StreamingDataset(tbl, global_batch_size=4, columns=["id", "no_such_column"])
    with pytest.raises(cr.InvalidArgumentError, match="columns must be a list"):
        cr.StreamingDataset(tbl, global_batch_size=4, columns="id")


@pytest.mark.parametrize(
    ("kwargs", "numbers"),
    [
        ({"global_batch_size": 10, "num_splits": 4}, ["10", "4"]),  # G % S
        ({"global_batch_size": 12, "num_splits": 4, "world_size": 3}, ["4", "3"]),  # S % W
        ({"global_batch_size": 2048, "num_splits": 2048}, ["2048", "1003"]),  # S > M
        ({"global_batch_size": 8, "num_splits": 4, "rank": 2, "world_size": 2}, ["2"]),
        ({"global_batch_size": 8, "num_splits": 4, "rank": -1, "world_size": 2}, ["-1"]),
    ],
)
def test_bad_numbers(table_uri: str, kwargs: dict[str, int], numbers: list[str]) -> None:
    tbl = cr.open_table(table_uri)
    with pytest.raises(cr.InvalidArgumentError) as info:
        cr.StreamingDataset(tbl, **kwargs)
    assert isinstance(info.value, ValueError)
    for n in numbers:
        assert n in str(info.value)


def test_not_a_number(table_uri: str) -> None:
    with pytest.raises(cr.InvalidArgumentError, match="global_batch_size"):
        cr.StreamingDataset(cr.open_table(table_uri), global_batch_size=8.5)  # type: ignore[arg-type]


def test_error_classes() -> None:
    assert error_class(StatusCode.CHANGED) is cr.ChangedError
    assert error_class(StatusCode.UNAVAILABLE) is cr.UnavailableError
    assert issubclass(cr.UnavailableError, ConnectionError)
    assert issubclass(cr.ForkError, RuntimeError)
    assert error_class(StatusCode.PERMISSION_DENIED) is cr.PermissionDeniedError
    assert issubclass(cr.PermissionDeniedError, PermissionError)
    assert error_class(StatusCode.RESOURCE_EXHAUSTED) is cr.ResourceExhaustedError
    assert issubclass(cr.ResourceExhaustedError, OSError)
    assert error_class(99) is cr.InternalError
    for code in StatusCode:
        if code != StatusCode.OK:
            assert error_class(code).code == code


_OPEN = """
import sys
import croupier as cr
try:
    cr.open_table(sys.argv[1])
except PermissionError as e:
    print(type(e).__name__, e)
"""


def _open_without_credentials(uri: str, env: dict[str, str]) -> str:
    """What opening ``uri`` prints in a process with environment ``env``."""
    out = subprocess.run(
        [sys.executable, "-c", _OPEN, uri],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.stdout.startswith("PermissionDeniedError "), out.stdout + out.stderr
    return out.stdout


def test_missing_credentials(tmp_path: Path) -> None:
    """No AWS credentials anywhere: PermissionDeniedError (a PermissionError) saying
    which credentials were looked for, at once (no request is sent unsigned)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env |= {
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    uri = "s3://bucket/t?endpoint=http://127.0.0.1:9&use_path_style=true&region=us-east-1&disable_https=true"
    assert "AWS_ACCESS_KEY_ID" in _open_without_credentials(uri, env)


@pytest.mark.parametrize(
    ("uri", "hints"),
    [
        (
            "gs://bucket/t",
            [
                "GOOGLE_APPLICATION_CREDENTIALS",
                "gcloud auth application-default login",
                "metadata server",
                "anonymous=true",
            ],
        ),
        (
            "azblob://container/t",
            ["AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "DefaultAzureCredential"],
        ),
    ],
)
def test_missing_cloud_credentials(tmp_path: Path, uri: str, hints: list[str]) -> None:
    """No Google or Azure credentials: opening the table raises PermissionDeniedError
    naming the URI and how to provide credentials (NO_GCE_CHECK: no metadata probe)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GOOGLE_", "CLOUDSDK_", "GCE_", "AZURE_"))
    }
    env |= {"HOME": str(tmp_path), "NO_GCE_CHECK": "True"}
    message = _open_without_credentials(uri, env)
    for hint in [uri, *hints]:
        assert hint in message, message


def test_credentials_in_uri_refused() -> None:
    secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
    for bad in (
        f"s3://bucket/prefix?region=us-east-1&aws_secret_access_key={secret}",
        f"s3://AKIAEXAMPLE:{secret}@bucket/prefix",
    ):
        with pytest.raises(cr.InvalidArgumentError, match="environment") as info:
            cr.open_table(bad)
        assert secret not in str(info.value)


# -- corrupt and hostile input on disk -------------------------------------------------


def test_truncated_parquet(tmp_path: Path) -> None:
    (path,) = write_files(tmp_path / "t", [50])
    full = path.read_bytes()
    for n in [0, 4, 11, 12, len(full) // 3, len(full) - 9, len(full) - 1]:
        path.write_bytes(full[:n])
        with pytest.raises(cr.CorruptError, match=r"part-00000\.parquet") as info:
            cr.open_table(uri(path))
        assert info.value.code == StatusCode.CORRUPT


def test_page_crc_mismatch(tmp_path: Path) -> None:
    """A flipped bit in a page of a file written with page CRCs raises CorruptError."""
    path = tmp_path / "crc.parquet"
    table = pa.table({"x": pa.array(range(1000), pa.int64())})
    pq.write_table(
        table, path, compression="snappy", use_dictionary=False, write_page_checksum=True
    )
    col = pq.ParquetFile(path).metadata.row_group(0).column(0)
    data = bytearray(path.read_bytes())
    data[col.data_page_offset + col.total_compressed_size // 2] ^= 0x01
    path.write_bytes(bytes(data))
    ds = cr.StreamingDataset(cr.open_table(uri(path)), global_batch_size=1000, format="arrow")
    with pytest.raises(cr.CorruptError, match=r"crc\.parquet.*CRC"):
        list(ds)


def test_truncated_data_file_of_a_croupier_table(tmp_path: Path) -> None:
    tbl = cr.create_table(f"file://{tmp_path}/t", rows(0, 40))
    (data,) = (tmp_path / "t" / "data").glob("*.parquet")
    data.write_bytes(data.read_bytes()[:-50])
    ds = cr.StreamingDataset(tbl, global_batch_size=8, format="arrow")
    with pytest.raises(cr.ChangedError, match=data.name):
        list(ds)


def _manifest(tmp_path: Path) -> tuple[str, Path]:
    cr.create_table(f"file://{tmp_path}/t", rows(0, 40)).close()
    return f"file://{tmp_path}/t", tmp_path / "t" / "_versions" / ("0" * 19 + "1.json")


@pytest.mark.parametrize("damage", ["truncated", "garbage", "trailing data", "rows disagree"])
def test_corrupt_manifest(tmp_path: Path, damage: str) -> None:
    table_uri, manifest = _manifest(tmp_path)
    text = manifest.read_text()
    manifest.write_text(
        {
            "truncated": text[: len(text) // 2],
            "garbage": "\x00\x01 not json",
            "trailing data": text + "{}",
            "rows disagree": text.replace('"num_rows":40', '"num_rows":41', 1),
        }[damage]
    )
    with pytest.raises(cr.CorruptError, match=manifest.name) as info:
        cr.open_table(table_uri)
    assert "corrupt manifest" in str(info.value)


ESCAPES = [
    "../outside.parquet",
    "/etc/passwd",
    "s3://other-bucket/x.parquet",
    "%2e%2e/outside.parquet",
]


@pytest.mark.parametrize("key", ESCAPES)
def test_manifest_keys_cannot_leave_the_table(tmp_path: Path, key: str) -> None:
    table_uri, manifest = _manifest(tmp_path)
    (data,) = (tmp_path / "t" / "data").glob("*.parquet")
    (tmp_path / "outside.parquet").write_bytes(data.read_bytes())
    m = json.loads(manifest.read_text())
    m["files"][0]["key"] = key
    manifest.write_bytes(_sealed(m))
    with pytest.raises(cr.CorruptError, match=re.escape(json.dumps(key))):
        cr.open_table(table_uri)


def _sealed(m: dict[str, object]) -> bytes:
    """Encode manifest ``m`` sealed with its SHA-256, as a writer does (internal/seal)."""
    body = json.dumps({k: v for k, v in m.items() if k != "sha256"}, separators=(",", ":"))
    body = body[:-1].encode()
    return body + b',"sha256":"' + hashlib.sha256(body).hexdigest().encode() + b'"}\n'


def test_flipped_manifest_bit(tmp_path: Path) -> None:
    table_uri, manifest = _manifest(tmp_path)
    data = bytearray(manifest.read_bytes())
    data[len(data) // 3] ^= 0x04
    manifest.write_bytes(bytes(data))
    with pytest.raises(cr.CorruptError, match="does not match its sha256"):
        cr.open_table(table_uri)


def test_pickled_pin_cannot_leave_the_table(tmp_path: Path) -> None:
    write_files(tmp_path / "t", [20])
    write_files(tmp_path / "other", [20])
    tbl = cr.open_table(uri(tmp_path / "t"))
    state = pickle.loads(pickle.dumps(tbl.__getstate__()))
    pin = json.loads(state["pin"])
    for key in ["../other/part-00000.parquet", str(tmp_path / "other" / "part-00000.parquet")]:
        pin["files"][0]["key"] = key
        copy = cr.Table.__new__(cr.Table)  # as pickle.loads makes it
        copy.__setstate__({**state, "pin": json.dumps(pin)})
        with pytest.raises(cr.CorruptError, match="corrupt pin"):
            cr.StreamingDataset(copy, global_batch_size=4, format="arrow")


def test_corrupt_permutation_chunk(tmp_path: Path) -> None:
    write_files(tmp_path / "t", [100])
    perm_uri = f"file://{tmp_path}/perm"
    tbl = cr.open_table(uri(tmp_path / "t"))
    perms = cr.PermutationBuilder(tbl).shuffle(seed=1).persist(perm_uri)
    (chunk,) = (tmp_path / "perm").glob("*/0/*.ids")
    chunk.write_bytes(chunk.read_bytes()[:-4])
    with pytest.raises(cr.CorruptError, match=r"00000000\.ids.*396 bytes"):
        cr.open_permutations(perm_uri)[0].row_ids(0, 10)
    perms.close()
