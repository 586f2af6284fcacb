"""Bad input gets a clear exception naming what and where (SPEC §6, §3.6)."""

from __future__ import annotations

from pathlib import Path

import pytest

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
    with pytest.raises(cr.InvalidArgumentError, match="list of names"):
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
    assert error_class(99) is cr.InternalError
    for code in StatusCode:
        if code != StatusCode.OK:
            assert error_class(code).code == code


def test_credentials_in_uri_refused() -> None:
    secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
    for uri in (
        f"s3://bucket/prefix?region=us-east-1&aws_secret_access_key={secret}",
        f"s3://AKIAEXAMPLE:{secret}@bucket/prefix",
    ):
        with pytest.raises(cr.InvalidArgumentError, match="environment") as info:
            cr.open_table(uri)
        assert secret not in str(info.value)
