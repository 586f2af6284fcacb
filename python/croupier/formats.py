"""Turn one Arrow record batch into the format a training loop asked for.

Formats:

``"arrow"``
    the :class:`pyarrow.RecordBatch` itself.
``"numpy"``
    ``{name: numpy.ndarray}``; fixed-width columns without nulls share Arrow's
    memory (read-only arrays), other columns are converted. No value changes
    type on the way: a fixed-width column (integers of every width, unsigned
    included, floats, booleans, timestamps, dates, durations) with nulls
    becomes a :class:`numpy.ma.MaskedArray` of its own dtype, null where
    masked, never a float64 array with NaN (which would round 2**53 + 1 to
    2**53 and turn a float's NaN into a null); a list column becomes an object
    array of one array per row (``None`` for a null list) converted the same
    way; a dictionary-encoded column is decoded first; decimals, strings,
    binary and structs become object arrays of Python values.
``"torch"``
    ``{name: torch.Tensor | list}``:

    - integer, floating-point and boolean columns become 1-D tensors. Without
      nulls they share Arrow's memory (through DLPack; booleans are bit-packed in
      Arrow and therefore copied). Nulls in a floating-point column become NaN
      (a copy); nulls in an integer or boolean column raise
      :class:`~croupier.InvalidArgumentError` naming the column, as a tensor has
      no way to mark them. Temporal columns arrive as their integer
      representation (int32/int64).
    - ``list<number>`` columns (token ids, logprobs) arrive, by ``list_format``,
      either ``"packed"``: ``name`` is a 1-D tensor of all values (zero-copy) and
      ``name + "_offsets"`` an int64 tensor of ``rows + 1`` offsets starting at 0
      (usable as ``cu_seqlens``); or ``"padded"``: ``name`` is a
      ``[rows, max_len]`` tensor padded with 0 and ``name + "_lengths"`` an
      int64 tensor of the lengths. A null list, or a null inside a list, raises
      :class:`~croupier.InvalidArgumentError` naming the column.
    - ``fixed_size_list<number>`` columns (embeddings) become ``[rows, size]``
      tensors.
    - every other column (strings, binary, structs, nested lists) becomes a
      Python list.
``"python"``
    a list of row dicts (:meth:`pyarrow.RecordBatch.to_pylist`).

Every format gives each value exactly, or raises
:class:`~croupier.InvalidArgumentError` naming the column and the fix: the
formats that build Python objects (``"python"``, ``"numpy"`` object arrays,
``"torch"``'s Python lists) raise on a ``time64[ns]`` value that is not a
whole number of microseconds, as :class:`datetime.time` would drop its
nanoseconds.

Packing (``StreamingDataset(..., packing=..., pack_columns=[...])``, see
:func:`pack`) turns several aligned ``list<number>`` columns of a step (tokens,
logprobs, advantages, loss masks: each row's lists have one length) into
one sequence per column, with ``cu_seqlens`` and ``position_ids``
(``"packed"``), or into ``[rows, longest]`` arrays with an
``attention_mask`` (``"padded"``); the other columns convert as above.

A batch from the Go core may hold several consecutive steps (small steps are
coalesced, so that crossing into Python and converting are paid once for all
of them): :func:`convert_steps` converts it once and hands out each step's
share as slices, the same values :func:`convert` gives for that step alone.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, get_args

import numpy as np
import pyarrow as pa

from . import _torch
from ._args import Format, ListFormat, Packing
from .errors import InvalidArgumentError

if TYPE_CHECKING:
    import torch

__all__ = [
    "FORMATS",
    "LIST_FORMATS",
    "PACKINGS",
    "PACK_KEYS",
    "check_format",
    "check_packing",
    "convert",
    "convert_steps",
    "pack",
]

FORMATS: tuple[Format, ...] = get_args(Format)
LIST_FORMATS: tuple[ListFormat, ...] = get_args(ListFormat)
PACKINGS: tuple[Packing, ...] = get_args(Packing)
# The keys packing adds beside the packed columns, by packing.
PACK_KEYS = {"packed": ("cu_seqlens", "position_ids"), "padded": ("attention_mask", "position_ids")}


def check_format(format: str, list_format: str) -> None:
    """Raise InvalidArgumentError unless both names are known."""
    if format not in FORMATS:
        raise InvalidArgumentError(f"format={format!r} is not one of {', '.join(FORMATS)}")
    if format == "torch":
        _torch.require('format="torch" (the default)')
    if list_format not in LIST_FORMATS:
        raise InvalidArgumentError(
            f"list_format={list_format!r} is not one of {', '.join(LIST_FORMATS)}"
        )


def check_step_size(
    global_batch_size: int | None,
    tokens_per_step: int | None,
    oversize: str | None,
    packing: str | None,
) -> bool:
    """Raise InvalidArgumentError unless exactly one of ``global_batch_size``
    and ``tokens_per_step`` sizes a step, and ``oversize="truncate"`` has
    packing to cut; return whether steps are token budgets."""
    if (global_batch_size is None) == (tokens_per_step is None):
        raise InvalidArgumentError(
            "give global_batch_size (samples per step) or tokens_per_step (tokens per "
            f"step), exactly one; got {global_batch_size!r} and {tokens_per_step!r}"
        )
    if oversize == "truncate" and packing is None:
        raise InvalidArgumentError(
            'oversize="truncate" cuts the pack_columns of a row longer than '
            'tokens_per_step: pass packing="packed" or "padded" and pack_columns'
        )
    return tokens_per_step is not None


def check_packing(
    packing: str | None, columns: list[str] | None, format: str, all_columns: list[str]
) -> None:
    """Raise InvalidArgumentError unless ``packing`` of ``columns`` fits ``format``
    and the keys it adds name no column of the batches (``all_columns``)."""
    if packing is None:
        if columns:
            raise InvalidArgumentError(
                'pack_columns is given without packing: pass packing="packed" or "padded"'
            )
        return
    if packing not in PACKINGS:
        raise InvalidArgumentError(f"packing={packing!r} is not one of {', '.join(PACKINGS)}")
    if not columns:
        raise InvalidArgumentError(
            f"packing={packing!r} needs pack_columns: the aligned list columns to pack"
        )
    if format == "python" or (format == "arrow" and packing == "padded"):
        raise InvalidArgumentError(
            f'packing={packing!r} does not apply to format="{format}": use "torch" or "numpy"'
            + (', or packing="packed"' if format == "arrow" else "")
        )
    if missing := [c for c in columns if c not in all_columns]:
        raise InvalidArgumentError(
            f"pack_columns {missing} are not among the columns read: {all_columns}"
        )
    if taken := [k for k in PACK_KEYS[packing] if k in all_columns]:
        raise InvalidArgumentError(
            f"packing={packing!r} adds {list(PACK_KEYS[packing])}, but the batches have "
            f"columns named {taken}: rename them, or read fewer columns"
        )


def pack(
    batch: pa.RecordBatch,
    columns: list[str],
    packing: str,
    format: str,
    list_format: str = "packed",
    pad_value: float | dict[str, float] = 0,
    truncate: int | None = None,
) -> dict[str, Any]:
    """One step's rows with the aligned list ``columns`` packed (see the module doc).

    ``"packed"``: each of ``columns`` is one 1-D array of every row's values in
    row order (zero-copy where Arrow's layout allows), ``cu_seqlens`` the
    int32 row boundaries (``rows + 1`` of them, from 0) and ``position_ids``
    the int64 position of each value in its row. ``"padded"``: each of
    ``columns`` is ``[rows, longest]``, padded with ``pad_value`` (one number,
    or one per column, default 0), ``attention_mask`` is True where a value
    is, and ``position_ids`` counts positions in each row (0 under padding).
    The ``"arrow"`` format (packed only) gives pyarrow arrays. Other columns
    convert as :func:`convert` converts them. With ``truncate`` = n, rows
    longer than n keep their first n values in every packed column.

    Raises:
        InvalidArgumentError: a column of ``columns`` that is not a list of
            numbers, holds a null, or whose row differs in length from the same
            row of the first column (the message names both columns and the row).
    """
    lengths: np.ndarray | None = None
    values: dict[str, pa.Array] = {}
    for name in columns:
        column = batch.column(name)
        if not _is_number_list(column.type):
            raise InvalidArgumentError(
                f'pack column "{name}" is {column.type}, not a list of numbers'
            )
        _no_nulls(name, column, "a null list")
        offsets = numpy_view(column.offsets).astype(np.int64)  # a sliced column's own
        start = int(offsets[0])
        row_values = column.values.slice(start, int(offsets[-1]) - start)
        _no_nulls(name, row_values, "a null inside a list")
        n = np.diff(offsets)
        if lengths is None:
            lengths = n
        elif not np.array_equal(n, lengths):
            row = int(np.flatnonzero(n != lengths)[0])
            raise InvalidArgumentError(
                f'pack columns "{columns[0]}" and "{name}" are not aligned: row {row} of the '
                f"step holds {lengths[row]} and {n[row]} values"
            )
        values[name] = row_values
    assert lengths is not None
    if truncate is not None and (lengths > truncate).any():
        keep = pa.array(_positions(lengths, np.cumsum(lengths) - lengths) < truncate)
        values = {name: v.filter(keep) for name, v in values.items()}
        lengths = np.minimum(lengths, truncate)
    starts = np.cumsum(lengths) - lengths
    others = [c for c in batch.schema.names if c not in values]
    if format == "arrow":
        out: dict[str, Any] = {name: batch.column(name) for name in others}
        out.update(values)
        out["cu_seqlens"] = arrow_ints(np.append(starts, lengths.sum()).astype(np.int32))
        out["position_ids"] = arrow_ints(_positions(lengths, starts))
        return out
    rest = convert(batch.select(others), format, list_format)
    as_array = _number_tensor if format == "torch" else _numpy_column
    packed: dict[str, Any] = {name: as_array(name, v) for name, v in values.items()}
    if packing == "packed":
        extra: dict[str, Any] = {
            "cu_seqlens": np.append(starts, lengths.sum()).astype(np.int32),
            "position_ids": _positions(lengths, starts),
        }
    else:
        longest = int(lengths.max()) if len(lengths) else 0
        mask = np.arange(longest) < lengths[:, None]
        for name, v in packed.items():
            flat = v if isinstance(v, np.ndarray) else v.numpy()
            fill = pad_value.get(name, 0) if isinstance(pad_value, dict) else pad_value
            padded = np.full((len(lengths), longest), fill, dtype=flat.dtype)
            padded[mask] = flat  # row-major order is the packed order
            packed[name] = padded
        positions = np.zeros((len(lengths), longest), dtype=np.int64)
        positions[mask] = _positions(lengths, starts)
        extra = {"attention_mask": mask, "position_ids": positions}
    if format == "torch":
        import torch

        packed = {
            k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in packed.items()
        }
        extra = {k: torch.from_numpy(v) for k, v in extra.items()}
    return {**rest, **packed, **extra}


def _positions(lengths: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The int64 position of every packed value inside its row."""
    out: np.ndarray = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(starts, lengths)
    return out


def convert(batch: pa.RecordBatch, format: str, list_format: str = "packed") -> Any:
    """Convert ``batch`` to ``format`` (see the module documentation)."""
    if format == "arrow":
        return batch
    if format == "python":
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            _python_exact(name, column, objects=True)
        return batch.to_pylist()
    if format == "numpy":
        return {
            name: _numpy_column(name, column)
            for name, column in zip(batch.schema.names, batch.columns, strict=True)
        }
    if format == "torch":
        out: dict[str, Any] = {}
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            out.update(_torch_column(name, column, list_format))
        return out
    check_format(format, list_format)
    raise AssertionError("unreachable")


def convert_or_pack_steps(
    batch: pa.RecordBatch,
    sizes: Sequence[int],
    format: str,
    list_format: str,
    packing: str | None,
    pack_columns: list[str] | None,
    pad_value: float | dict[str, float] = 0,
    truncate: int | None = None,
) -> Iterator[Any]:
    """The consecutive steps of ``batch``, of ``sizes`` rows, each converted
    (:func:`convert_steps`) or, with ``packing``, packed (:func:`pack`)."""
    if packing is None or pack_columns is None:
        return convert_steps(batch, sizes, format, list_format)
    starts = itertools.accumulate(sizes[:-1], initial=0)
    return (
        pack(
            batch.slice(start, rows),
            pack_columns,
            packing,
            format,
            list_format,
            pad_value,
            truncate,
        )
        for start, rows in zip(starts, sizes, strict=True)
    )


def convert_steps(
    batch: pa.RecordBatch, sizes: Sequence[int], format: str, list_format: str = "packed"
) -> Iterator[Any]:
    """Convert each of the consecutive slices of ``batch`` of ``sizes`` rows to ``format``.

    ``sizes`` sum to the batch's rows. Each slice converts to what
    :func:`convert` returns for that slice alone, errors included, but the
    batch is converted once and the slices share its memory.
    """
    ends = list(itertools.accumulate(sizes))
    if not ends or ends[-1] != batch.num_rows:
        raise InvalidArgumentError(f"steps of {list(sizes)} rows in a batch of {batch.num_rows}")
    bounds = list(zip([0, *ends[:-1]], ends, strict=True))
    steps = len(bounds)
    whole = None
    # Step by step: padded lists (each step is padded to its own longest list),
    # and numpy with nulls or nested columns (a column's dtype, or its lists'
    # values' dtype, depends on whether the step holds a null).
    by_step = (
        steps == 1
        or format == "arrow"
        or (format == "torch" and list_format == "padded")
        or (
            format == "numpy"
            and any(c.null_count or pa.types.is_nested(c.type) for c in batch.columns)
        )
    )
    if not by_step:
        # A step that holds what the format cannot represent raises at that step.
        with contextlib.suppress(InvalidArgumentError):
            whole = convert(batch, format, list_format)
    if whole is None:
        for a, b in bounds:
            yield convert(batch.slice(a, b - a), format, list_format)
        return
    if format == "python":
        for a, b in bounds:
            yield whole[a:b]
        return
    # Packed lists: each step's values and its offsets, rebased to start at 0
    # (in numpy, where slicing and subtracting cost a tenth of torch's).
    # torch format only: numpy's lists are objects.
    packed = {
        f.name: whole[f.name + "_offsets"].numpy()
        for f in batch.schema
        if format == "torch" and _is_number_list(f.type)
    }
    offsets = {name + "_offsets" for name in packed}
    for a, b in bounds:
        out = {}
        for key, value in whole.items():
            if key in packed:
                import torch

                step_offsets = packed[key][a : b + 1]
                start = int(step_offsets[0])
                out[key] = value[start : int(step_offsets[-1])]
                out[key + "_offsets"] = torch.from_numpy(step_offsets - start)
            elif key not in offsets:
                out[key] = value[a:b]
        yield out


# ---------------------------------------------------------------------------
# exactness


def _python_exact(name: str, column: pa.Array, objects: bool = False) -> None:
    """Raise unless every value of ``column`` converts exactly: to a Python object
    when ``objects``, else to what numpy and torch make of it.

    pyarrow converts ``time64[ns]`` to :class:`datetime.time`, which holds
    microseconds: it drops the nanoseconds without a word. Nanosecond
    timestamps and durations become pandas objects, exact, where pandas is
    installed; without it pyarrow cannot convert them, so they raise here,
    naming the column. Every other type converts exactly.
    """
    type_ = column.type
    if pa.types.is_dictionary(type_):
        _python_exact(name, column.dictionary_decode(), objects)
    elif pa.types.is_struct(type_):
        for i in range(type_.num_fields):
            _python_exact(f"{name}.{type_.field(i).name}", column.field(i), objects)
    elif pa.types.is_map(type_):
        _python_exact(name, column.keys, objects)
        _python_exact(name, column.items, objects)
    elif _is_list(type_):
        _python_exact(name, column.values, objects)
    elif type_ == pa.time64("ns"):
        _no_nanoseconds(
            name,
            column,
            'which datetime.time cannot hold: use format="arrow", or cast the column '
            '(pyarrow.compute.cast) to int64 nanoseconds or to time64("us")',
        )
    elif objects and _nanosecond_time(type_) and importlib.util.find_spec("pandas") is None:
        _no_nanoseconds(
            name,
            column,
            "which datetime cannot hold (pyarrow returns pandas objects for them, and pandas "
            'is not installed): install pandas, use format="arrow", or cast the column '
            "(pyarrow.compute.cast) to int64 nanoseconds",
        )


def _nanosecond_time(type_: pa.DataType) -> bool:
    """Whether ``type_`` is a timestamp or a duration in nanoseconds."""
    return bool(
        (pa.types.is_timestamp(type_) or pa.types.is_duration(type_)) and type_.unit == "ns"
    )


def _no_nanoseconds(name: str, column: pa.Array, why: str) -> None:
    """Raise, saying ``why``, if a value of ``column`` has a part below a microsecond."""
    nanos = column.view(pa.int64()).to_numpy(zero_copy_only=False)
    lost = nanos % 1000 != 0
    if column.null_count:
        lost &= column.is_valid().to_numpy(zero_copy_only=False)
    if lost.any():
        raise InvalidArgumentError(
            f'column "{name}" ({column.type}) holds {int(lost.sum())} value(s) with '
            f"nanoseconds, {why}"
        )


def _is_list(type_: pa.DataType) -> bool:
    return bool(
        pa.types.is_list(type_)
        or pa.types.is_large_list(type_)
        or pa.types.is_fixed_size_list(type_)
    )


# ---------------------------------------------------------------------------
# numpy


def _numpy_column(name: str, column: pa.Array) -> np.ndarray:
    """One column as a numpy array that holds every value exactly (see the module doc)."""
    type_ = column.type
    if pa.types.is_dictionary(type_):
        return _numpy_column(name, column.dictionary_decode())
    if _is_list(type_):
        return _numpy_lists(name, column)
    _python_exact(name, column)  # times become datetime.time objects
    if _is_number(type_) and column.null_count:
        # The values under the nulls, read as if there were none: the
        # column's own dtype (datetime64, uint64, bool, ...), then masked.
        data = pa.Array.from_buffers(
            type_, len(column), [None, column.buffers()[1]], null_count=0, offset=column.offset
        )
        mask = column.is_null().to_numpy(zero_copy_only=False)
        return np.ma.MaskedArray(data.to_numpy(zero_copy_only=False), mask=mask)
    return numpy_view(column)


def _numpy_lists(name: str, column: pa.Array) -> np.ndarray:
    """An object array of one array per row (None for a null list), values converted once."""
    type_ = column.type
    if pa.types.is_fixed_size_list(type_):
        size = type_.list_size
        starts = (np.arange(len(column) + 1) + column.offset) * size
    else:
        starts = numpy_view(column.offsets)  # a sliced column's own
    values = _numpy_column(name, column.values)
    valid = column.is_valid().to_numpy(zero_copy_only=False) if column.null_count else None
    out = np.empty(len(column), dtype=object)
    for i in range(len(column)):
        out[i] = values[starts[i] : starts[i + 1]] if valid is None or valid[i] else None
    return out


# ---------------------------------------------------------------------------
# torch


def _is_number(type_: pa.DataType) -> bool:
    """Types that map to a torch dtype (after the temporal -> integer view)."""
    return bool(
        pa.types.is_integer(type_)
        or pa.types.is_floating(type_)
        or pa.types.is_boolean(type_)
        or pa.types.is_temporal(type_)
    )


def _is_number_list(type_: pa.DataType) -> bool:
    """Variable-size lists of numbers (token ids, logprobs)."""
    return (pa.types.is_list(type_) or pa.types.is_large_list(type_)) and _is_number(
        type_.value_type
    )


def numpy_view(array: pa.Array) -> np.ndarray:
    """``array.to_numpy(zero_copy_only=False)`` of an integer or floating-point
    array without nulls, read in place from its buffer (a sliced array's own
    values).

    pyarrow's conversion to numpy imports pandas where pandas is installed,
    on its first use in a process: about 45 MiB of resident memory for a
    process that had not imported it (pyarrow 26), which a batch's numbers and
    its list columns' offsets have no use for. Other arrays go through
    ``to_numpy``.
    """
    type_ = array.type
    if array.null_count or not (pa.types.is_integer(type_) or pa.types.is_floating(type_)):
        out: np.ndarray = array.to_numpy(zero_copy_only=False)
        return out
    if pa.types.is_floating(type_):
        kind = "f"
    elif pa.types.is_signed_integer(type_):
        kind = "i"
    else:
        kind = "u"
    dtype = np.dtype(f"<{kind}{type_.bit_width // 8}")
    data = array.buffers()[1]
    if data is None or len(array) == 0:
        return np.empty(0, dtype=dtype)
    return np.frombuffer(data, dtype=dtype, count=len(array), offset=array.offset * dtype.itemsize)


def arrow_ints(values: np.ndarray) -> pa.Array:
    """A 1-D numpy array of int32 or int64 as an Arrow array sharing its memory:
    ``pa.array`` of a numpy array imports pandas as ``to_numpy`` does (see
    :func:`numpy_view`)."""
    types = {np.dtype("int32"): pa.int32(), np.dtype("int64"): pa.int64()}
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(types[values.dtype], len(values), [None, pa.py_buffer(values)])


def _torch_column(name: str, column: pa.Array, list_format: str) -> dict[str, Any]:
    """One column as ``{name: ...}`` plus its ``_offsets``/``_lengths`` companion if any."""
    type_ = column.type
    if _is_number(type_):
        return {name: _number_tensor(name, column)}
    if pa.types.is_fixed_size_list(type_) and _is_number(type_.value_type):
        _no_nulls(name, column, "a null list")
        values = _number_tensor(name, column.flatten())
        return {name: values.reshape(len(column), type_.list_size)}
    if _is_number_list(type_):
        values, offsets = _list_parts(name, column)
        if list_format == "packed":
            return {name: values, name + "_offsets": offsets}
        padded, lengths = _pad(values, offsets)
        return {name: padded, name + "_lengths": lengths}
    _python_exact(name, column, objects=True)
    return {name: column.to_pylist()}


def _no_nulls(name: str, array: pa.Array, what: str) -> None:
    if array.null_count:
        raise InvalidArgumentError(
            f'column "{name}" has {array.null_count} null value(s) ({what}); format="torch" '
            'cannot represent them: fill them (pyarrow.compute.fill_null) or use format="arrow"'
        )


def _number_tensor(name: str, array: pa.Array) -> torch.Tensor:
    """A 1-D tensor of a fixed-width column: zero-copy when Arrow's layout allows."""
    import torch

    type_ = array.type
    if pa.types.is_temporal(type_):
        array = array.view(pa.int32() if type_.bit_width == 32 else pa.int64())
    if array.null_count and pa.types.is_floating(type_):
        array = array.fill_null(float("nan"))  # a copy; NaN is a float's own null
    _no_nulls(name, array, "integers and booleans have no NaN")
    if pa.types.is_boolean(type_):
        return torch.from_numpy(array.to_numpy(zero_copy_only=False))  # bit-packed: a copy
    from torch.utils.dlpack import from_dlpack

    return from_dlpack(array)  # shares the Arrow buffer, sliced offsets included


def _list_parts(name: str, column: pa.Array) -> tuple[torch.Tensor, torch.Tensor]:
    """Values (zero-copy) and int64 offsets starting at 0 of a list column."""
    import torch

    _no_nulls(name, column, "a null list")
    offsets = numpy_view(column.offsets)  # respects a sliced column's offset
    start, stop = int(offsets[0]), int(offsets[-1])
    values = column.values.slice(start, stop - start)
    _no_nulls(name, values, "a null inside a list")
    rebased = offsets.astype(np.int64) - start
    return _number_tensor(name, values), torch.from_numpy(rebased)


def _pad(values: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Packed (values, offsets) -> ([rows, max_len] padded with 0, lengths)."""
    import torch

    # numpy: its boolean-mask assignment is ~100x faster than torch's on CPU.
    lengths = np.diff(offsets.numpy())
    max_len = int(lengths.max()) if len(lengths) else 0
    padded = np.zeros((len(lengths), max_len), dtype=values.numpy().dtype)
    padded[np.arange(max_len) < lengths[:, None]] = values.numpy()  # row-major = packed order
    return torch.from_numpy(padded), torch.from_numpy(lengths)
