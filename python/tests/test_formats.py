"""Batch formats: torch (packed/padded lists, zero-copy), numpy, arrow, python; no leaks."""

from __future__ import annotations

import decimal
import importlib.util
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from conftest import plain, uri
from hypothesis import given, settings
from hypothesis import strategies as st

import croupier as cr
from croupier.formats import FORMATS, arrow_ints, convert, convert_steps, numpy_view


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
    """A batch of several steps, of any sizes (empty ones too, as a grouped
    deal gives a rank), converted once gives each step what converting it
    alone gives, in every format, errors included (at the step that holds them)."""
    n = data.draw(st.integers(1, 40))
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=6)))
    ends = [*cuts, n]
    sizes = [b - a for a, b in zip([0, *ends[:-1]], ends, strict=True)]
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
        got = convert_steps(batch, sizes, format, list_format)
        for k, size in enumerate(sizes):
            part = batch.slice(sum(sizes[:k]), size)
            try:
                want = convert(part, format, list_format)
            except cr.InvalidArgumentError as e:
                with pytest.raises(cr.InvalidArgumentError, match=re.escape(str(e))):
                    next(got)
                break
            assert plain(next(got)) == plain(want), (format, list_format, k)
        else:
            assert next(got, None) is None


# Every type a column can have, with the values that a lossy conversion would
# change: 2**53 + 1, the extremes of each width, NaN and -0.0, nanoseconds.
BIG = 2**53 + 1
TYPES: dict[str, pa.Array] = {
    "int8": pa.array([-128, 127, 0], pa.int8()),
    "int16": pa.array([-(2**15), 2**15 - 1, 0], pa.int16()),
    "int32": pa.array([-(2**31), 2**31 - 1, 0], pa.int32()),
    "int64": pa.array([BIG, -(2**63), 2**63 - 1], pa.int64()),
    "uint8": pa.array([0, 255, 1], pa.uint8()),
    "uint16": pa.array([0, 2**16 - 1, 1], pa.uint16()),
    "uint32": pa.array([0, 2**32 - 1, 1], pa.uint32()),
    "uint64": pa.array([BIG, 2**64 - 1, 0], pa.uint64()),
    "float16": pa.array(np.array([1.5, -0.0, np.inf], dtype=np.float16)),
    "float32": pa.array([1.1, -0.0, float("nan")], pa.float32()),
    "float64": pa.array([float(BIG), -0.0, float("nan")], pa.float64()),
    "bool": pa.array([True, False, True]),
    "timestamp_ns": pa.array([1, 1_700_000_000_123_456_789, -1], pa.timestamp("ns")),
    "timestamp_us_tz": pa.array([1, 2, 3], pa.timestamp("us", tz="Europe/Paris")),
    "date32": pa.array([0, 19_000, -1], pa.date32()),
    "date64": pa.array([0, 86_400_000, -86_400_000], pa.date64()),
    "time32_ms": pa.array([0, 86_399_999, 1], pa.time32("ms")),
    "time64_us": pa.array([0, 86_399_999_999, 1], pa.time64("us")),
    "time64_ns": pa.array([0, 86_399_999_999_999, 1_000], pa.time64("ns")),
    "duration_ns": pa.array([1, -1, BIG], pa.duration("ns")),
    "decimal128": pa.array(
        [decimal.Decimal("1.23"), decimal.Decimal("-99999.99"), 0], pa.decimal128(7, 2)
    ),
    "decimal256": pa.array([decimal.Decimal(BIG), decimal.Decimal("-1"), 0], pa.decimal256(40, 0)),
    "string": pa.array(["a", "", "é"]),
    "large_string": pa.array(["a", "", "é"], pa.large_string()),
    "binary": pa.array([b"\x00", b"", b"\xff"]),
    "list_int64": pa.array([[BIG], [], [1, 2]], pa.list_(pa.int64())),
    "large_list_int64": pa.array([[BIG], [], [1, 2]], pa.large_list(pa.int64())),
    "list_float32": pa.array([[1.5], [], [float("nan")]], pa.list_(pa.float32())),
    "fixed_size_list_float32": pa.FixedSizeListArray.from_arrays(
        pa.array(np.arange(6, dtype=np.float32)), 2
    ),
    "struct": pa.array([{"a": BIG, "b": "x"}, {"a": 0, "b": ""}, {"a": -1, "b": "z"}]),
    "dictionary_int64": pa.array([BIG, 1, BIG]).dictionary_encode(),
    "dictionary_string": pa.array(["a", "b", "a"]).dictionary_encode(),
}


def _same(got: pa.Array, want: pa.Array) -> bool:
    """Equal types, nulls and values; floats compared by their bits (NaN, -0.0)."""
    if pa.types.is_dictionary(want.type):
        want = want.dictionary_decode()
    if pa.types.is_dictionary(got.type):
        got = got.dictionary_decode()
    if got.type != want.type or not got.is_null().equals(want.is_null()):
        return False
    if pa.types.is_floating(want.type):
        bits = (
            pa.int16()
            if want.type == pa.float16()
            else pa.int32()
            if want.type == pa.float32()
            else pa.int64()
        )
        return bool(got.view(bits).fill_null(0).equals(want.view(bits).fill_null(0)))
    if _is_list_type(want.type):
        return all(
            (g is None) == (w is None) and (g is None or _same(g, w))
            for g, w in zip(_list_values(got), _list_values(want), strict=True)
        )
    return bool(got.equals(want))


def _is_list_type(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def _list_values(a: pa.Array) -> list[pa.Array | None]:
    return [s.values if s.is_valid else None for s in a]


def _from_numpy(value: np.ndarray, t: pa.DataType) -> pa.Array:
    """The Arrow array a numpy conversion stands for."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if _is_list_type(t):
        items = [None if v is None else _from_numpy(v, t.value_type) for v in value]
        lists = pa.array([None if v is None else [] for v in items], pa.large_list(t.value_type))
        values = pa.concat_arrays(
            [v for v in items if v is not None] or [pa.array([], t.value_type)]
        )
        offsets = np.concatenate([[0], np.cumsum([0 if v is None else len(v) for v in items])])
        return pa.LargeListArray.from_arrays(
            pa.array(offsets, pa.int64()), values, mask=lists.is_null()
        ).cast(t)
    if isinstance(value, np.ma.MaskedArray):
        return pa.array(value.data, type=t, mask=np.ma.getmaskarray(value))
    return pa.array(value, type=t)


def _from_torch(out: dict[str, object], name: str, t: pa.DataType) -> pa.Array:
    """The Arrow array a torch conversion stands for (integer views of temporal types)."""
    value = out[name]
    if isinstance(value, list):
        return pa.array(value, t.value_type if pa.types.is_dictionary(t) else t)
    assert isinstance(value, torch.Tensor)
    storage = t
    if pa.types.is_temporal(t):
        storage = pa.int32() if t.bit_width == 32 else pa.int64()
    if pa.types.is_fixed_size_list(t):
        return pa.FixedSizeListArray.from_arrays(
            pa.array(value.flatten().numpy(), t.value_type), t.list_size
        )
    if _is_list_type(t):
        offsets = pa.array(out[name + "_offsets"].numpy(), pa.int64())  # type: ignore[attr-defined]
        values = pa.array(value.numpy(), t.value_type)
        return pa.LargeListArray.from_arrays(offsets, values).cast(t)
    return pa.array(value.numpy(), storage).view(t)


@pytest.mark.parametrize("nulls", [False, True], ids=["no-nulls", "nulls"])
@pytest.mark.parametrize("name", list(TYPES))
def test_every_format_keeps_every_value(name: str, nulls: bool) -> None:
    """Each format gives every value of every type exactly, or raises naming the column.

    The cases that raise are exactly those a format cannot represent: nulls in
    torch tensors of integers, booleans, temporal values and lists (floats'
    nulls become NaN), Python's datetime.time for nanoseconds, and, without
    pandas, Python objects for nanosecond timestamps and durations.
    """
    column = TYPES[name]
    if nulls:
        column = pa.concat_arrays([column, pa.nulls(1, column.type)]).slice(1)  # sliced, too
    batch = pa.record_batch({name: column})
    t = column.type  # a dictionary column comes to torch as a Python list
    torch_nulls = (
        nulls
        and not pa.types.is_floating(t)
        and (cr.formats._is_number(t) or (_is_list_type(t) and cr.formats._is_number(t.value_type)))
    )
    # Without pandas, pyarrow cannot give nanosecond timestamps and durations
    # as Python objects.
    no_pandas = importlib.util.find_spec("pandas") is None
    raises = (
        ({"torch"} if torch_nulls else set())
        | ({"python", "numpy"} if name == "time64_ns" else set())
        | ({"python"} if no_pandas and name in ("timestamp_ns", "duration_ns") else set())
    )
    for format in FORMATS:
        if format in raises:
            with pytest.raises(cr.InvalidArgumentError, match=f'"{name}"'):
                convert(batch, format)
            continue
        out = convert(batch, format)
        if format == "arrow":
            got = out.column(0)
        elif format == "python":
            got = pa.array([row[name] for row in out], column.type)
        elif format == "numpy":
            got = _from_numpy(out[name], column.type)
        else:
            got = _from_torch(out, name, column.type)
        want = column
        if format == "torch" and nulls and pa.types.is_floating(column.type):
            want = column.fill_null(float("nan"))  # a float's null is NaN in a tensor
        assert _same(got, want), (format, got, want)


@pytest.mark.parametrize("name", list(TYPES))
def test_go_reads_every_value(tmp_path: Path, name: str) -> None:
    """Rows that croupier's Go core reads from Parquet and hands over as Arrow hold
    every value exactly, nulls included: the types of ``TYPES`` as pyarrow writes them.

    One known exception, which loses no value: a date64 column comes back as
    date32 (Parquet stores days; arrow-go reads them as date32). Durations,
    which arrow-go cannot read, croupier's own decoder reads as the counts of
    units they are stored as.
    """
    column = pa.concat_arrays([TYPES[name], pa.nulls(1, TYPES[name].type)])
    pq.write_table(
        pa.table({"id": pa.array(range(len(column))), name: column}), tmp_path / "a.parquet"
    )
    ds = cr.StreamingDataset(
        cr.open_table(uri(tmp_path)), global_batch_size=len(column), drop_last=False, format="arrow"
    )
    (batch,) = list(ds)
    got = batch.column(name).take(pc.sort_indices(batch.column("id")))
    if name == "date64":
        column = column.cast(pa.date32())
    assert _same(got, column), (got, column)


NUMBER_TYPES = [
    pa.int8(),
    pa.int16(),
    pa.int32(),
    pa.int64(),
    pa.uint8(),
    pa.uint16(),
    pa.uint32(),
    pa.uint64(),
    pa.float16(),
    pa.float32(),
    pa.float64(),
]


@pytest.mark.parametrize("type_", NUMBER_TYPES, ids=str)
def test_numpy_view_reads_as_to_numpy(type_: pa.DataType) -> None:
    values = np.arange(-5, 45).astype(type_.to_pandas_dtype())
    array = pa.array(values, type=type_)
    for part in (array, array.slice(7, 20), array.slice(50), array.slice(3, 0)):
        view = numpy_view(part)
        want = part.to_numpy(zero_copy_only=False)
        assert view.dtype == want.dtype
        np.testing.assert_array_equal(view, want)


def test_numpy_view_falls_back_for_nulls_and_other_types() -> None:
    with_null = pa.array([1, None, 3], type=pa.int32())
    assert numpy_view(with_null).tolist()[::2] == [1.0, 3.0]
    assert numpy_view(pa.array([True, False])).tolist() == [True, False]
    offsets = pa.array([[1, 2], [], [3]], type=pa.large_list(pa.int32())).slice(1).offsets
    assert numpy_view(offsets).tolist() == [2, 2, 3]


def test_arrow_ints_shares_the_values() -> None:
    for dtype in (np.int32, np.int64):
        values = np.arange(6, dtype=dtype)[::2]
        array = arrow_ints(values)
        assert array.type == pa.from_numpy_dtype(dtype)
        assert array.to_pylist() == [0, 2, 4]


CONVERT_WITHOUT_PANDAS = """
import sys
import numpy as np
import pyarrow as pa
from croupier.formats import arrow_ints, convert, convert_steps, pack
tokens = pa.ListArray.from_arrays(
    arrow_ints(np.array([0, 2, 5, 9], dtype=np.int32)), arrow_ints(np.arange(9, dtype=np.int64))
)
ids = arrow_ints(np.arange(3, dtype=np.int64))
batch = pa.RecordBatch.from_arrays([ids, tokens], names=["id", "tokens"])
for fmt, lists in (("torch", "packed"), ("torch", "padded"), ("numpy", "packed")):
    convert(batch, fmt, lists)
    list(convert_steps(batch, [1, 2], fmt, lists))
for fmt in ("arrow", "torch", "numpy"):
    pack(batch, ["tokens"], "packed", fmt, "packed")
print("pandas" in sys.modules)
"""


def test_conversions_leave_pandas_unimported() -> None:
    """Converting numbers and lists imports no pandas (tens of MiB resident):
    in a fresh process, as a training process that never imported it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", CONVERT_WITHOUT_PANDAS],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert out.stdout.strip() == "False", out.stderr
