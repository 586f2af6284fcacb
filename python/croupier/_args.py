"""Checks of the arguments of croupier's public functions.

Every public entry point checks its arguments here before anything reaches
the Go core, so that a wrong type or an out-of-range value raises
:class:`~croupier.InvalidArgumentError` naming the argument, the value and
what is allowed, instead of a message about JSON or Go types.
"""

from __future__ import annotations

import math
import numbers
import operator
import os
from collections.abc import Sequence
from typing import Any, Literal

from .errors import InvalidArgumentError

# The names string options take, as types: a type checker flags a wrong one
# before it runs; the functions that take them check them all the same.
Format = Literal["torch", "numpy", "arrow", "python"]
"""What a batch is: torch tensors, numpy arrays, a pyarrow RecordBatch, or Python lists."""
ListFormat = Literal["packed", "padded"]
"""How a list column is given: its values end to end with offsets, or padded rows."""
Packing = Literal["packed", "padded"]
"""How token-budget steps lay out their pack columns: end to end, or padded."""
Oversize = Literal["error", "truncate"]
"""What a row longer than the token budget is: an error, or a step of its own, cut."""
OnExhausted = Literal["stop", "cycle", "renormalize"]
"""What a mixture slot does when it draws a source whose epoch has no step left."""

__all__ = [
    "INT64_MAX",
    "UINT64_MAX",
    "Where",
    "integer",
    "integers",
    "local_path",
    "number",
    "optional_integer",
    "reals",
    "strings",
    "text",
    "uri",
]

INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1

# Where a table or permutation lives: a URI, or a local path (see uri).
Where = str | os.PathLike[str]


def _got(value: Any) -> str:
    return f"{value!r} ({type(value).__name__})"


def _bounds(low: int, high: int) -> str:
    if high == INT64_MAX:
        return f">= {low}"
    return f"in [{low}, {high}]"


def integer(name: str, value: Any, low: int = 0, high: int = INT64_MAX) -> int:
    """``value`` as an int in ``[low, high]``; booleans and floats are refused."""
    try:
        if isinstance(value, bool):
            raise TypeError(value)
        n = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(
            f"{name} must be an integer {_bounds(low, high)}, got {_got(value)}"
        ) from None
    if not low <= n <= high:
        raise InvalidArgumentError(f"{name} must be an integer {_bounds(low, high)}, got {n}")
    return n


def optional_integer(name: str, value: Any, low: int = 1, high: int = INT64_MAX) -> int | None:
    """``None``, or ``value`` checked by :func:`integer`."""
    return None if value is None else integer(name, value, low, high)


def integers(name: str, values: Any, low: int = 0, high: int = INT64_MAX) -> list[int]:
    """A non-empty sequence of ints in ``[low, high]``."""
    items = _sequence(name, values)
    return [integer(f"{name}[{i}]", v, low, high) for i, v in enumerate(items)]


def number(name: str, value: Any, low: float, high: float) -> float:
    """``value`` as a finite float in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(f"{name} must be a number, got {_got(value)}")
    x = float(value)
    if not (math.isfinite(x) and low <= x <= high):
        raise InvalidArgumentError(f"{name} must be a number in [{low}, {high}], got {value!r}")
    return x


def reals(name: str, values: Any, low: float, high: float) -> list[float]:
    """A non-empty sequence of finite floats in ``[low, high]``."""
    items = _sequence(name, values)
    return [number(f"{name}[{i}]", v, low, high) for i, v in enumerate(items)]


def strings(name: str, values: Any) -> list[str]:
    """A non-empty sequence of strings (a lone string is refused)."""
    return [text(f"{name}[{i}]", v) for i, v in enumerate(_sequence(name, values))]


def text(name: str, value: Any) -> str:
    """``value``, which must be a string."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a string, got {_got(value)}")
    return value


def local_path(name: str, value: Any) -> str:
    """``value``, a string or an :class:`os.PathLike`, as a string."""
    return text(name, os.fspath(value) if isinstance(value, os.PathLike) else value)


def uri(name: str, value: Any) -> str:
    """``value`` as a URI: one with a scheme (``s3://…``, ``file:///…``) as it
    is; a local path, a string or an :class:`os.PathLike`, as the
    ``file://`` URI of its absolute path, as the ``croupier`` command takes
    them."""
    where = local_path(name, value)
    if "://" in where:
        return where
    return "file://" + os.path.abspath(where)


def _sequence(name: str, values: Any) -> Sequence[Any]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise InvalidArgumentError(f"{name} must be a list, got {_got(values)}")
    if not values:
        raise InvalidArgumentError(f"{name} must not be empty")
    return values
