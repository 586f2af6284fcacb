"""Status codes of the C ABI and the exceptions they become in Python.

The codes are shared by the Go core (package ``errcode``), the C ABI
(``cabi/ABI.md``) and this module. Each code maps to exactly one exception
class; every class also derives from the closest built-in exception, so
``except FileNotFoundError`` catches a missing table and ``except ValueError``
catches a bad argument.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "AlreadyExistsError",
    "CanceledError",
    "ChangedError",
    "ClosedError",
    "CorruptError",
    "CroupierError",
    "ForkError",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "StatusCode",
    "UnavailableError",
    "error_class",
]


class StatusCode(IntEnum):
    """Status codes returned by every fallible function of the C ABI."""

    OK = 0
    INTERNAL = 1
    INVALID_ARGUMENT = 2
    NOT_FOUND = 3
    CORRUPT = 4
    CHANGED = 5
    UNAVAILABLE = 6
    CLOSED = 7
    CANCELED = 8
    ALREADY_EXISTS = 9
    PERMISSION_DENIED = 10
    RESOURCE_EXHAUSTED = 11


class CroupierError(Exception):
    """Base class of every error croupier raises; ``code`` is its status code."""

    code: StatusCode = StatusCode.INTERNAL


class InternalError(CroupierError):
    """A bug or an unexpected failure in the Go core (includes recovered panics)."""

    code = StatusCode.INTERNAL


class InvalidArgumentError(CroupierError, ValueError):
    """A bad option, an unknown column, or numbers that do not fit together."""

    code = StatusCode.INVALID_ARGUMENT


class NotFoundError(CroupierError, FileNotFoundError):
    """A path, table, file or object does not exist."""

    code = StatusCode.NOT_FOUND


class CorruptError(CroupierError):
    """Data could not be decoded (not Parquet, truncated, bad footer)."""

    code = StatusCode.CORRUPT


class ChangedError(CroupierError):
    """A file of a pinned table version changed or vanished since it was pinned."""

    code = StatusCode.CHANGED


class UnavailableError(CroupierError, ConnectionError):
    """The object store could not be reached (after bounded retries)."""

    code = StatusCode.UNAVAILABLE


class ClosedError(CroupierError):
    """The object was closed, or its handle was released or never existed."""

    code = StatusCode.CLOSED


class CanceledError(CroupierError):
    """The operation was canceled."""

    code = StatusCode.CANCELED


class AlreadyExistsError(CroupierError, FileExistsError):
    """A table, version or permutation that must be new already exists."""

    code = StatusCode.ALREADY_EXISTS


class PermissionDeniedError(CroupierError, PermissionError):
    """The store refused the credentials, or no credentials were found.

    The message says which credentials were looked for.
    """

    code = StatusCode.PERMISSION_DENIED


class ResourceExhaustedError(CroupierError, OSError):
    """A resource of this host ran out, such as open file descriptors."""

    code = StatusCode.RESOURCE_EXHAUSTED


class ForkError(CroupierError, RuntimeError):
    """The Go core was loaded in a parent process before ``fork()``.

    Raised by Python, never by Go: a forked child must not call into the Go
    runtime (the call would hang), so croupier refuses before calling. ``code``
    is ``INTERNAL`` because the C ABI has no code of its own for it.
    """

    code = StatusCode.INTERNAL


class LayoutWarning(UserWarning):
    """A read decodes many times the bytes it delivers because of how its
    table is laid out (pages of many rows), and a rewrite would fix it.

    Warned once per dataset in each process, with the table, the ratio, the
    column and what to run (docs/tuning.md, "Row group and page sizes").
    """


class BudgetWarning(UserWarning):
    """A DataLoader worker sent a run of steps holding more bytes beyond its
    slots' share than its largest row: rows larger than the stream guessed
    crossed together (rows far larger than the rest that no file declared,
    as values in a dictionary page or pages of a remote file without an
    offset index, or rows far larger than those the guess was made from),
    and the process tree may grow past the bound ``memory_budget`` states.

    Warned in the training process, once per iteration of a
    ``croupier.DataLoader``, with the run, its bytes and the share
    (docs/tuning.md, "memory_budget is a bound").
    """


_CLASSES: dict[StatusCode, type[CroupierError]] = {
    cls.code: cls
    for cls in (
        InternalError,
        InvalidArgumentError,
        NotFoundError,
        CorruptError,
        ChangedError,
        UnavailableError,
        ClosedError,
        CanceledError,
        AlreadyExistsError,
        PermissionDeniedError,
        ResourceExhaustedError,
    )
}


def error_class(code: int) -> type[CroupierError]:
    """Return the exception class for a non-zero status code.

    Codes this version does not know (from a newer library) map to
    :class:`InternalError`.
    """
    try:
        return _CLASSES[StatusCode(code)]
    except (ValueError, KeyError):
        return InternalError
