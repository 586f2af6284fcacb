"""Batch formats: torch (packed/padded lists, zero-copy), numpy, arrow, python; no leaks."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pyarrow as pa
import pytest
import torch
from conftest import plain
from hypothesis import given, settings
from hypothesis import strategies as st

import croupier as cr
from croupier.formats import FORMATS, convert, convert_steps


def first_batch(tbl: cr.Table, **kwargs: object) -> object:
    ds = cr.StreamingDataset(tbl, global_batch_size=16, num_splits=4, **kwargs)
    return next(iter(ds))


def expected_tokens(ids: list[int]) -> list[list[int]]:
    return [list(range(i, i + i % 7)) for i in ids]


def test_torch_packed(table_uri: str) -> None:
    batch = first_batch(cr.open_table(table_uri), columns=["id", "tokens", "reward", "flag"])
    ids = batch["id"].tolist()
    assert batch["id"].dtype == torch.int64
    assert batch["reward"].dtype == torch.float32
    assert batch["flag"].dtype == torch.bool
    assert batch["reward"].tolist() == [i * 0.5 for i in ids]
    assert batch["flag"].tolist() == [i % 3 == 0 for i in ids]
    tokens, offsets = batch["tokens"], batch["tokens_offsets"]
    assert tokens.dtype == torch.int32
    assert offsets.dtype == torch.int64
    assert offsets[0] == 0
    assert len(offsets) == len(ids) + 1
    rows = [tokens[a:b].tolist() for a, b in itertools.pairwise(offsets.tolist())]
    assert rows == expected_tokens(ids)


def test_torch_padded(table_uri: str) -> None:
    batch = first_batch(cr.open_table(table_uri), columns=["id", "tokens"], list_format="padded")
    ids = batch["id"].tolist()
    padded, lengths = batch["tokens"], batch["tokens_lengths"]
    assert lengths.tolist() == [i % 7 for i in ids]
    assert padded.shape == (len(ids), max(i % 7 for i in ids))
    for row, n, want in zip(padded.tolist(), lengths.tolist(), expected_tokens(ids), strict=True):
        assert row[:n] == want
        assert row[n:] == [0] * (len(row) - n)


def test_torch_strings_are_lists(table_uri: str) -> None:
    batch = first_batch(cr.open_table(table_uri), columns=["id", "text"])
    assert batch["text"] == [f"row {i}" for i in batch["id"].tolist()]


def test_zero_copy_from_go(table_uri: str) -> None:
    """Fixed-width columns and list values share the buffers Go exported."""
    rb = first_batch(cr.open_table(table_uri), columns=["id", "tokens"], format="arrow")
    assert isinstance(rb, pa.RecordBatch)
    ids, tokens = rb.column("id"), rb.column("tokens")
    id_address = ids.buffers()[1].address + ids.offset * 8
    out = convert(rb, "torch")
    assert out["id"].data_ptr() == id_address
    start = tokens.offsets[0].as_py()
    values_address = tokens.values.buffers()[1].address + (tokens.values.offset + start) * 4
    assert out["tokens"].data_ptr() == values_address
    as_numpy = convert(rb, "numpy")["id"]
    assert as_numpy.__array_interface__["data"][0] == id_address


def test_numpy_arrow_python(table_uri: str) -> None:
    tbl = cr.open_table(table_uri)
    as_numpy = first_batch(tbl, columns=["id", "tokens", "text"], format="numpy")
    assert isinstance(as_numpy["id"], np.ndarray)
    assert as_numpy["id"].dtype == np.int64
    ids = as_numpy["id"].tolist()
    assert [list(t) for t in as_numpy["tokens"]] == expected_tokens(ids)
    as_arrow = first_batch(tbl, columns=["id", "tokens", "text"], format="arrow")
    assert as_arrow.column("id").to_pylist() == ids
    assert as_arrow.schema.names == ["id", "tokens", "text"]
    as_python = first_batch(tbl, columns=["id", "tokens", "text"], format="python")
    assert as_python == [
        {"id": i, "tokens": t, "text": f"row {i}"}
        for i, t in zip(ids, expected_tokens(ids), strict=True)
    ]


def test_collate(table_uri: str) -> None:
    n = first_batch(cr.open_table(table_uri), columns=["id"], collate=lambda b: len(b["id"]))
    assert n == 16


def test_sliced_arrays_and_nulls() -> None:
    """Batches whose arrays start at a non-zero offset, with and without nulls."""
    full = pa.record_batch(
        {
            "i": pa.array(np.arange(10, dtype=np.int16)),
            "f": pa.array([1.0, None] * 5, type=pa.float32()),
            "l": pa.array([[1, 2], [3], [], [4, 5, 6], [7]] * 2, type=pa.list_(pa.int64())),
            "e": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(20, dtype=np.float32)), 2),
        }
    )
    rb = full.slice(3, 5)
    packed = convert(rb, "torch")
    assert packed["i"].tolist() == [3, 4, 5, 6, 7]
    assert packed["i"].data_ptr() == rb.column("i").buffers()[1].address + 3 * 2
    assert np.isnan(packed["f"].numpy()).tolist() == [True, False, True, False, True]
    assert packed["l"].tolist() == [4, 5, 6, 7, 1, 2, 3]
    assert packed["l_offsets"].tolist() == [0, 3, 4, 6, 7, 7]
    assert packed["e"].tolist() == [[6, 7], [8, 9], [10, 11], [12, 13], [14, 15]]
    padded = convert(rb, "torch", "padded")
    assert padded["l"].tolist() == [[4, 5, 6], [7, 0, 0], [1, 2, 0], [3, 0, 0], [0, 0, 0]]
    assert padded["l_lengths"].tolist() == [3, 1, 2, 1, 0]

    nulls = {
        "ints": pa.array([1, None, 3]),
        "null_list": pa.array([[1], None, [2]], type=pa.list_(pa.int32())),
        "null_inside": pa.array([[1], [None, 2], [3]], type=pa.list_(pa.int32())),
    }
    for name, column in nulls.items():
        with pytest.raises(cr.InvalidArgumentError, match=name):
            convert(pa.record_batch({name: column}), "torch")
    # a null outside the slice does not matter
    tail = pa.record_batch({"ints": pa.array([None, 1, 2])}).slice(1)
    assert convert(tail, "torch")["ints"].tolist() == [1, 2]


def test_unknown_formats(table_uri: str) -> None:
    tbl = cr.open_table(table_uri)
    with pytest.raises(cr.InvalidArgumentError, match="pandas"):
        cr.StreamingDataset(tbl, global_batch_size=4, format="pandas")
    with pytest.raises(cr.InvalidArgumentError, match="ragged"):
        cr.StreamingDataset(tbl, global_batch_size=4, list_format="ragged")


@settings(max_examples=60, deadline=None)
@given(
    lists=st.lists(st.lists(st.integers(-(2**31), 2**31 - 1), max_size=6), min_size=1),
    data=st.data(),
)
def test_lists_round_trip(lists: list[list[int]], data: st.DataObject) -> None:
    """Packed and padded forms of any (sliced) list<int32> column give back its rows."""
    start = data.draw(st.integers(0, len(lists) - 1))
    length = data.draw(st.integers(0, len(lists) - start))
    column = pa.array(lists, type=pa.list_(pa.int32())).slice(start, length)
    rb = pa.record_batch({"x": column})
    want = column.to_pylist()
    packed = convert(rb, "torch", "packed")
    values, offsets = packed["x"].tolist(), packed["x_offsets"].tolist()
    assert [values[a:b] for a, b in itertools.pairwise(offsets)] == want
    padded = convert(rb, "torch", "padded")
    rows, lengths = padded["x"].tolist(), padded["x_lengths"].tolist()
    assert [row[:n] for row, n in zip(rows, lengths, strict=True)] == want
    assert all(v == 0 for row, n in zip(rows, lengths, strict=True) for v in row[n:])


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_convert_steps_matches_convert(data: st.DataObject) -> None:
    """A batch of several steps converted once gives each step what converting it
    alone gives, in every format, errors included (at the step that holds them)."""
    n = data.draw(st.integers(1, 40))
    rows = data.draw(st.integers(1, n))
    steps = -(-n // rows)
    lists = data.draw(st.lists(st.lists(st.integers(0, 99), max_size=4), min_size=n, max_size=n))
    null_at = data.draw(st.none() | st.integers(0, n - 1))
    nan_at = data.draw(st.sampled_from([1, 3]))  # 3: a float column without nulls
    if (null_inside := data.draw(st.none() | st.integers(0, n - 1))) is not None:
        lists[null_inside] = [*lists[null_inside], None]
    columns = {
        "i": pa.array([None if j == null_at else j for j in range(n)], type=pa.int32()),
        "f": pa.array([None if j % 3 == nan_at else j / 2 for j in range(n)], type=pa.float64()),
        "b": pa.array([j % 2 == 0 for j in range(n)]),
        "l": pa.array(lists, type=pa.list_(pa.int32())),
        "s": pa.array([f"row {j}" for j in range(n)]),
        "e": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(2 * n, dtype=np.float32)), 2),
    }
    batch = pa.record_batch(columns)
    for format, list_format in [*((f, "packed") for f in FORMATS), ("torch", "padded")]:
        got = convert_steps(batch, steps, rows, format, list_format)
        for k in range(steps):
            part = batch.slice(k * rows, rows)
            try:
                want = convert(part, format, list_format)
            except cr.InvalidArgumentError as e:
                with pytest.raises(cr.InvalidArgumentError, match=re.escape(str(e))):
                    next(got)
                break
            assert plain(next(got)) == plain(want), (format, list_format, k)
        else:
            assert next(got, None) is None
