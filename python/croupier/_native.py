"""The native layer of the ctypes binding to ``libcroupier.so``, the C ABI of
the Go core (``cabi/ABI.md``): every call into Go goes through this module.
:mod:`croupier._lib` wraps the exports in typed functions over it. It

- declares the Arrow C Data Interface structs, the callback types and each
  export's signature (``_SIGNATURES``, checked against ``cabi/exports.json``),
- finds the library (``$CROUPIER_LIBRARY``, else the copy shipped in the package),
- loads it lazily on first use with :class:`ctypes.CDLL`, which releases the GIL
  during every call, and refuses a library of another C ABI version,
- records the loading process id and refuses, with :class:`~croupier.ForkError`,
  every later call from another process: the Go runtime does not survive
  ``fork()`` and a forked child's first call into it would hang,
- turns ``(status, char* err)`` into the matching exception and frees the string,
- keeps the main thread interruptible during calls (:class:`_Interruptible`): an
  exception a signal handler raises meanwhile, such as Ctrl-C's
  KeyboardInterrupt, cancels the call in Go (``croupier_cancel``) and is raised
  as soon as it has returned,
- moves Arrow data through the Arrow C Data Interface between Go and pyarrow,
- owns Go handles (:class:`Handle`), released exactly once and forgotten in a
  forked child,
- and offers the library-wide functions (:func:`init`, :func:`version`, ...).
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import sys
import threading
import weakref
from collections.abc import Callable
from importlib import resources
from types import TracebackType
from typing import Any, TypeVar

import pyarrow as pa

from . import _args
from .errors import ClosedError, ForkError, error_class

__all__ = [
    "ABI_VERSION",
    "LIBRARY_ENV",
    "PROGRESS",
    "REWRITE_PROGRESS",
    "ArrowArray",
    "ArrowArrayStream",
    "ArrowSchema",
    "Closeable",
    "GoObject",
    "Handle",
    "StopWaiting",
    "allocated_bytes",
    "gomaxprocs",
    "goroutines",
    "init",
    "library_path",
    "stop_waiting_when",
    "version",
]

LIBRARY_ENV = "CROUPIER_LIBRARY"


class ArrowSchema(ctypes.Structure):
    """``struct ArrowSchema`` of the Arrow C Data Interface (72 bytes)."""

    _fields_ = [
        ("format", ctypes.c_void_p),
        ("name", ctypes.c_void_p),
        ("metadata", ctypes.c_void_p),
        ("flags", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


class ArrowArray(ctypes.Structure):
    """``struct ArrowArray`` of the Arrow C Data Interface (80 bytes)."""

    _fields_ = [
        ("length", ctypes.c_int64),
        ("null_count", ctypes.c_int64),
        ("offset", ctypes.c_int64),
        ("n_buffers", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("buffers", ctypes.c_void_p),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


class ArrowArrayStream(ctypes.Structure):
    """``struct ArrowArrayStream`` of the Arrow C Stream Interface (40 bytes)."""

    _fields_ = [
        ("get_schema", ctypes.c_void_p),
        ("get_next", ctypes.c_void_p),
        ("get_last_error", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


assert ctypes.sizeof(ArrowArrayStream) == 40
assert ctypes.sizeof(ArrowSchema) == 72
assert ctypes.sizeof(ArrowArray) == 80

_ERR = ctypes.POINTER(ctypes.c_void_p)  # char** err: a c_void_p keeps the address to free
_HANDLE = ctypes.c_uint64
_HANDLE_OUT = ctypes.POINTER(ctypes.c_uint64)
_STR = ctypes.c_char_p
_STR_OUT = ctypes.POINTER(ctypes.c_void_p)
_INT = ctypes.c_int

# void (*croupier_progress)(const char* phase, int64_t done, int64_t total, int64_t kept,
#                           int64_t bytes)
PROGRESS = ctypes.CFUNCTYPE(
    None, ctypes.c_char_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64
)

# int (*croupier_rewrite_progress)(int64_t rows, int64_t total_rows, int64_t bytes,
#                                  int64_t total_bytes): nonzero cancels the rewrite
REWRITE_PROGRESS = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64
)

# The number of the C ABI this module speaks (cabi/main.go, abiVersion): the
# library must export the same, or its functions may take other arguments.
ABI_VERSION = 14

# One declaration per exported symbol: name -> (argtypes, restype).
_SIGNATURES: dict[str, tuple[list[Any], Any]] = {
    "croupier_version": ([], ctypes.c_char_p),
    "croupier_abi_version": ([], ctypes.c_int64),
    "croupier_init": ([ctypes.c_int64, ctypes.c_int64, _ERR], _INT),
    "croupier_allocated_bytes": ([], ctypes.c_int64),
    "croupier_goroutines": ([], ctypes.c_int64),
    "croupier_gomaxprocs": ([], ctypes.c_int64),
    "croupier_string_free": ([ctypes.c_void_p], None),
    "croupier_cancel": ([ctypes.c_uint64], ctypes.c_int64),
    "croupier_release": ([_HANDLE, _ERR], _INT),
    "croupier_table_open": ([_STR, _STR, _HANDLE_OUT, _ERR], _INT),
    "croupier_table_create": (
        [_STR, ctypes.POINTER(ArrowArrayStream), _STR, _HANDLE_OUT, _ERR],
        _INT,
    ),
    "croupier_table_append": (
        [_STR, ctypes.POINTER(ArrowArrayStream), _STR, ctypes.POINTER(ctypes.c_int64), _ERR],
        _INT,
    ),
    "croupier_table_rewrite": ([_HANDLE, _STR, _STR, REWRITE_PROGRESS, _HANDLE_OUT, _ERR], _INT),
    "croupier_table_versions": ([_STR, _STR_OUT, _ERR], _INT),
    "croupier_table_history": ([_STR, _STR_OUT, _ERR], _INT),
    "croupier_table_cleanup": ([_STR, _STR, _STR_OUT, _ERR], _INT),
    "croupier_catalog_register": ([_STR, _STR, _STR, _ERR], _INT),
    "croupier_catalog_lookup": ([_STR, _STR, _STR_OUT, _ERR], _INT),
    "croupier_table_open_pin": ([_STR, _STR, _HANDLE_OUT, _ERR], _INT),
    "croupier_table_pin": ([_HANDLE, _STR_OUT, _ERR], _INT),
    "croupier_table_info": ([_HANDLE, _STR_OUT, _ERR], _INT),
    "croupier_table_schema": ([_HANDLE, ctypes.POINTER(ArrowSchema), _ERR], _INT),
    "croupier_table_take": (
        [
            _HANDLE,
            ctypes.POINTER(ctypes.c_uint64),
            ctypes.c_int64,
            _STR,
            ctypes.POINTER(ArrowArray),
            ctypes.POINTER(ArrowSchema),
            _ERR,
        ],
        _INT,
    ),
    "croupier_dataset_step": ([_HANDLE, ctypes.c_int64, ctypes.c_int64, _STR_OUT, _ERR], _INT),
    "croupier_dataset_open": ([_HANDLE, _STR, _HANDLE_OUT, _ERR], _INT),
    "croupier_dataset_open_split": ([_HANDLE, ctypes.c_int64, _STR, _HANDLE_OUT, _ERR], _INT),
    "croupier_permutation_build": (
        [_HANDLE, _STR, _STR, _STR, PROGRESS, _HANDLE_OUT, _ERR],
        _INT,
    ),
    "croupier_permutation_rank_open": (
        [_HANDLE, _STR, _STR, _STR, PROGRESS, _HANDLE_OUT, _ERR],
        _INT,
    ),
    "croupier_permutation_rank_next": ([_HANDLE, _STR, _STR_OUT, _HANDLE_OUT, _ERR], _INT),
    "croupier_permutation_open": ([_STR, _STR, _HANDLE_OUT, _ERR], _INT),
    "croupier_permutation_info": ([_HANDLE, _STR_OUT, _ERR], _INT),
    "croupier_permutation_row_ids": (
        [
            _HANDLE,
            ctypes.c_int64,
            ctypes.c_int64,
            ctypes.c_int64,
            ctypes.POINTER(ctypes.c_uint64),
            _ERR,
        ],
        _INT,
    ),
    "croupier_dataset_info": ([_HANDLE, _STR_OUT, _ERR], _INT),
    "croupier_dataset_epoch_steps": (
        [_HANDLE, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64), _ERR],
        _INT,
    ),
    "croupier_stream_open": ([_HANDLE, _STR, _HANDLE_OUT, _ERR], _INT),
    "croupier_follow_open": ([_HANDLE, _STR, _HANDLE_OUT, _ERR], _INT),
    "croupier_follow_info": ([_HANDLE, _STR_OUT, _ERR], _INT),
    "croupier_follow_stream_open": ([_HANDLE, _STR, _HANDLE_OUT, _ERR], _INT),
    "croupier_follow_round": ([_HANDLE, _STR_OUT, _ERR], _INT),
    "croupier_follow_steps": (
        [_HANDLE, _STR, ctypes.c_int64, ctypes.c_int64, _STR_OUT, _ERR],
        _INT,
    ),
    "croupier_stream_stats": ([_HANDLE, _STR_OUT, _ERR], _INT),
    "croupier_stream_run_end": (
        [
            _HANDLE,
            ctypes.c_int64,
            ctypes.c_int64,
            ctypes.c_int64,
            ctypes.POINTER(ctypes.c_int64),
            _ERR,
        ],
        _INT,
    ),
    "croupier_mixture_open": (
        [ctypes.POINTER(ctypes.c_uint64), ctypes.c_int64, _STR, _HANDLE_OUT, _ERR],
        _INT,
    ),
    "croupier_mixture_plan": ([_HANDLE, _STR, ctypes.c_int64, _STR_OUT, _ERR], _INT),
    "croupier_mixture_end": ([_HANDLE, _STR, _STR_OUT, _ERR], _INT),
    "croupier_source_checkpoint": ([_HANDLE, _STR, _STR_OUT, _ERR], _INT),
    "croupier_source_restore": ([_HANDLE, _STR, _STR, _STR_OUT, _ERR], _INT),
    "croupier_mixture_weights": ([_HANDLE, ctypes.c_int64, _STR_OUT, _ERR], _INT),
    "croupier_mixture_checkpoint": ([_HANDLE, _STR, _STR_OUT, _ERR], _INT),
    "croupier_mixture_resume": ([_HANDLE, _STR, _STR_OUT, _ERR], _INT),
    "croupier_mixture_stream_open": ([_HANDLE, _STR, _STR, _HANDLE_OUT, _ERR], _INT),
    "croupier_mixture_stream_next": (
        [
            _HANDLE,
            ctypes.c_int64,
            ctypes.POINTER(ArrowArray),
            ctypes.POINTER(ArrowSchema),
            ctypes.POINTER(ctypes.c_int64),
            _STR_OUT,
            _ERR,
        ],
        _INT,
    ),
    "croupier_stream_next": (
        [
            _HANDLE,
            ctypes.POINTER(ArrowArray),
            ctypes.POINTER(ArrowSchema),
            ctypes.POINTER(ctypes.c_int64),
            ctypes.POINTER(ctypes.c_int64),
            _ERR,
        ],
        _INT,
    ),
    "croupier_merge_shared": (
        [
            ctypes.POINTER(ArrowArrayStream),
            ctypes.c_int64,
            ctypes.POINTER(ArrowArray),
            ctypes.POINTER(ArrowSchema),
            ctypes.POINTER(ctypes.c_int64),
            _ERR,
        ],
        _INT,
    ),
}

_lock = threading.Lock()
_dll: ctypes.CDLL | None = None
_load_pid: int | None = None
_string_free: Callable[[int], None] | None = None
_cancel: Callable[[int], int] | None = None
_settings: tuple[int, int] = (0, 0)  # (gomaxprocs, memory_limit) for croupier_init; 0 = as is


def library_path() -> str:
    """Path of the shared library this process loads (or would load)."""
    override = os.environ.get(LIBRARY_ENV)
    if override:
        return override
    return str(resources.files("croupier") / "libcroupier.so")


def _check_pid() -> None:
    if _load_pid is not None and os.getpid() != _load_pid:
        raise ForkError(
            f"the croupier Go core was loaded in process {_load_pid} before fork(); this is "
            f"process {os.getpid()}, a forked child, and the Go runtime does not survive "
            "fork(), so croupier refuses to call it here (the call would hang). Start worker "
            'processes with multiprocessing_context="spawn" or "forkserver" '
            "(croupier.DataLoader forks its workers from a fork server), or load croupier "
            "only after forking."
        )


def _lib() -> ctypes.CDLL:
    """The loaded library, loading it on first use; raises ForkError in a forked child."""
    global _dll, _load_pid, _string_free, _cancel
    _check_pid()
    if _dll is not None:
        return _dll
    with _lock:
        if _dll is None:
            path = library_path()
            try:
                dll = ctypes.CDLL(path)
            except OSError as exc:
                raise OSError(
                    f"cannot load the croupier library {path}: {exc} (build it with `make build`, "
                    f"or set {LIBRARY_ENV} to its path)"
                ) from exc
            _check_abi(dll, path)
            for name, (argtypes, restype) in _SIGNATURES.items():
                fn = getattr(dll, name)
                fn.argtypes = argtypes
                fn.restype = restype
            _load_pid = os.getpid()
            _string_free = dll.croupier_string_free
            _cancel = dll.croupier_cancel
            _call(dll.croupier_init, *_settings)
            _dll = dll
    return _dll


def _check_abi(dll: ctypes.CDLL, path: str) -> None:
    """Refuse a library built for another version of this module."""
    fn = getattr(dll, "croupier_abi_version", None)
    found = "none (it predates ABI versions)"
    if fn is not None:
        fn.argtypes, fn.restype = [], ctypes.c_int64
        found = str(fn())
    if found != str(ABI_VERSION):
        raise ImportError(
            f"the croupier library {path} speaks C ABI version {found}, but this croupier "
            f"package speaks version {ABI_VERSION}: rebuild it with `make build`, or set "
            f"{LIBRARY_ENV} to a library of this version"
        )


def _take_string(ptr: ctypes.c_void_p) -> str:
    """Decode a string returned through ``char**`` and free it with croupier_string_free."""
    if not ptr.value:
        return ""
    try:
        return ctypes.string_at(ptr.value).decode("utf-8", errors="replace")
    finally:
        assert _string_free is not None  # a string can only come from the loaded library
        _string_free(ptr.value)


# How long the main thread waits for a call before it checks again for a signal
# that another thread received, and how often it repeats a cancellation that
# may have come before the call began in Go.
_POLL = 0.05


class _Call:
    """One call into Go, made by the helper thread of :class:`_Interruptible`."""

    __slots__ = (
        "args", "canceled", "done", "error", "finished", "fn", "lock", "result", "started",
    )  # fmt: skip

    def __init__(self, fn: Callable[..., int], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args
        self.lock = threading.Lock()
        self.done = threading.Lock()
        self.done.acquire()  # released once the call has returned, or was skipped
        # finished tells the waiter the call is over also when a signal handler
        # raised just after it had taken done.
        self.started = self.canceled = self.finished = False
        self.result = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with self.lock:
                if self.canceled:
                    return
                self.started = True
            self.result = self.fn(*self.args)
        except BaseException as exc:  # raised in the calling thread
            self.error = exc
        finally:
            self.finished = True
            self.done.release()

    def cancel(self) -> bool:
        """Skip the call if it has not begun; True if it has, and must be waited for."""
        with self.lock:
            self.canceled = True
            return self.started


class StopWaiting(Exception):
    """Raised in a process's main thread, in place of the call into Go it was
    waiting for, once :func:`stop_waiting_when`'s condition holds."""


_stop_when: Callable[[], bool] | None = None


def stop_waiting_when(condition: Callable[[], bool] | None) -> None:
    """Have the main thread cancel the call into Go it waits for, and raise
    :class:`StopWaiting`, once ``condition()`` is true (checked every 50 ms),
    then stop checking; None stops checking. A DataLoader worker passes its
    loop's ``done_event``: torch gives a worker 5 s to exit once it is set,
    which a worker waiting in Go, for versions of a followed table say, would
    not see."""
    global _stop_when
    _stop_when = condition


class _Interruptible:
    """Makes the main thread's calls into Go on a helper thread, so that the main
    thread waits on a lock, which signals interrupt, instead of inside C, where
    Python runs no signal handler until the call returns: Ctrl-C would wait for
    minutes of retries on a stalled store. The same wait ends, cancelling the
    call, when :func:`stop_waiting_when`'s condition holds.

    When a signal handler raises while the main thread waits (KeyboardInterrupt,
    or any exception), the call is canceled (``croupier_cancel`` on the helper
    thread, repeated until the call returns, in case it came before the call
    began in Go), waited for, so that whatever it made is owned and released,
    and the exception is raised. Only the main thread runs signal handlers; other
    threads, calls made while the main thread already waits for one (by a
    garbage collection or a signal handler), and calls at interpreter exit go
    straight to C.
    """

    def __init__(self) -> None:
        self._todo: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._ident = 0  # the helper thread's, which is its pthread_self() in Go
        self._busy = False

    def __call__(self, fn: Callable[..., int], *args: Any) -> int:
        if (
            self._busy
            or threading.current_thread() is not threading.main_thread()
            or sys.is_finalizing()
        ):
            return fn(*args)
        if self._thread is None:
            self._thread = threading.Thread(target=self._serve, name="croupier-calls", daemon=True)
            self._thread.start()
            self._ident = self._thread.ident or 0
        call = _Call(fn, args)
        try:
            self._busy = True
            self._todo.put(call)
            while not call.done.acquire(timeout=_POLL):
                if _stop_when is not None and _stop_when():
                    stop_waiting_when(None)  # once: the calls that clean up then run whole
                    raise StopWaiting("croupier: told to stop while waiting for the Go core")
        except BaseException:
            self._cancel(call)
            raise
        finally:
            self._busy = False
        if call.error is not None:
            raise call.error
        return call.result

    def _serve(self) -> None:
        while True:
            self._todo.get().run()

    def _cancel(self, call: _Call) -> None:
        if not call.cancel():
            return
        assert _cancel is not None  # a call can only begin once the library is loaded
        while not call.finished:
            _cancel(self._ident)
            try:
                call.done.acquire(timeout=_POLL)
            except BaseException:  # another signal: the call must still end first
                continue


_interruptible = _Interruptible()


def _call(fn: Callable[..., int], *args: Any) -> None:
    """Call a fallible C function whose last parameter is ``char** err``; raise on failure."""
    err = ctypes.c_void_p()
    try:
        status = _interruptible(fn, *args, ctypes.byref(err))
    finally:
        message = _take_string(err)
    if status != 0:
        raise error_class(status)(message or f"croupier: status {status} without a message")


def _str_out(name: str, *args: Any) -> str:
    out = ctypes.c_void_p()
    _call(getattr(_lib(), name), *args, ctypes.byref(out))
    return _take_string(out)


def _json_out(name: str, handle: int) -> str:
    return _str_out(name, handle)


def _handle_out(name: str, *args: Any) -> Handle:
    """Call a function that makes a handle (``uint64_t* out``); returns its owner.

    The Handle exists before the call and Go writes into it, so an exception
    raised as the call returns (a signal handler's KeyboardInterrupt, delivered
    while Go was working) cannot leak the new handle.
    """
    fn = getattr(_lib(), name)  # loaded first: a Handle records the loading process
    handle = Handle()
    _call(fn, *args, ctypes.byref(handle._cell))
    return handle


# void (*release)(struct ArrowArray*), and the same for struct ArrowSchema
_RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def _release_unimported(struct: ArrowArray | ArrowSchema) -> None:
    """Release a C Data Interface struct that Go filled but Python did not import.

    Importing moves a struct and leaves its ``release`` NULL; this is a no-op
    then. Otherwise an exception raised between the call and the import (a
    signal handler's KeyboardInterrupt) would leak the Arrow memory.
    """
    if struct.release:
        _RELEASE(struct.release)(ctypes.addressof(struct))


class _BatchOut:
    """The out parameters of a call that exports one record batch: an
    ``ArrowArray``, and an ``ArrowSchema`` unless the caller knows the schema
    (every batch of a stream has the schema of its first, and exporting it
    costs about as much as exporting the batch). As a context, it releases
    what the call filled and Python did not import."""

    def __init__(self, schema: pa.Schema | None) -> None:
        self._schema = schema
        self._array = ArrowArray()
        self._c_schema = ArrowSchema() if schema is None else None

    def args(self) -> tuple[Any, Any]:
        """The call's ``out_array`` and ``out_schema`` (NULL when the schema is known)."""
        c_schema = None if self._c_schema is None else ctypes.byref(self._c_schema)
        return ctypes.byref(self._array), c_schema

    def batch(self) -> pa.RecordBatch:
        """The batch the call exported."""
        schema = self._schema if self._c_schema is None else ctypes.addressof(self._c_schema)
        return pa.RecordBatch._import_from_c(ctypes.addressof(self._array), schema)

    def __enter__(self) -> _BatchOut:
        return self

    def __exit__(self, *exc: object) -> None:
        _release_unimported(self._array)
        if self._c_schema is not None:
            _release_unimported(self._c_schema)


# PyCapsule_GetPointer with its own prototype: setting argtypes on
# ctypes.pythonapi's shared function object would change it for every user.
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


class _ExportedStream:
    """A reader's ArrowArrayStream, exported through the Arrow PyCapsule
    interface: ``ref`` points at the stream the capsule holds, which lives as
    long as this object. Where the core takes the stream over it marks it
    released, and the capsule frees nothing twice; where it does not, the
    capsule releases it."""

    def __init__(self, reader: pa.RecordBatchReader) -> None:
        self._capsule = reader.__arrow_c_stream__()
        self.ref = ctypes.cast(
            _capsule_pointer(self._capsule, b"arrow_array_stream"), ctypes.POINTER(ArrowArrayStream)
        )


def _encode(value: str | dict[str, Any]) -> bytes:
    return (value if isinstance(value, str) else json.dumps(value)).encode("utf-8")


# ---------------------------------------------------------------------------
# Handles


# The handles alive in this process. A forked child forgets them: it must never
# release one, as the Go runtime does not survive fork() (see _check_pid).
_handles: weakref.WeakSet[Handle] = weakref.WeakSet()


def _forget_handles() -> None:
    for handle in list(_handles):
        handle._finalizer.detach()


os.register_at_fork(after_in_child=_forget_handles)


_C = TypeVar("_C", bound="Closeable")


class Closeable:
    """``with`` support for objects with a ``close()`` method."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class GoObject(Closeable):
    """A Python object in front of one Go object.

    Its handle is opened on first use, and again on first use after
    unpickling (a DataLoader worker process), by :meth:`_open_go`, and
    released by :meth:`close`. Subclasses set ``_go = None`` and ``_closed =
    False`` before their first use.
    """

    _go: Handle | None
    _closed: bool

    def _open_go(self) -> Handle:
        raise NotImplementedError

    def _handle(self) -> int:
        """The Go handle, opened if this process has none yet."""
        if self._closed:
            raise ClosedError(f"the {type(self).__name__} is closed")
        if self._go is None:
            self._go = self._open_go()
        return self._go.value

    def close(self) -> None:
        """Release the Go object (idempotent). What it reads from stays open."""
        self._closed = True
        if self._go is not None:
            self._go.close()


class Handle:
    """Owns one Go handle and releases it exactly once.

    Made empty by :func:`_handle_out` (after the library is loaded) and filled
    by the Go call. Released by :meth:`close`, or by a :func:`weakref.finalize`
    fallback when the owner is garbage-collected; a forked child forgets it.
    The release is ``croupier_release`` itself, called by the finalizer with
    the cell: no line of Python runs between the decision to release and the
    release, where a KeyboardInterrupt would leave the handle open. An empty
    cell (0) is never a handle, and releasing it does nothing.
    """

    __slots__ = ("__weakref__", "_cell", "_finalizer")

    def __init__(self) -> None:
        assert _dll is not None
        self._cell = ctypes.c_uint64(0)
        self._finalizer = weakref.finalize(self, _dll.croupier_release, self._cell, None)
        _handles.add(self)

    @property
    def value(self) -> int:
        """The raw handle; raises ClosedError once released, ForkError in a forked child."""
        _check_pid()  # before a forked child finds its handles forgotten
        if not self._finalizer.alive:
            raise ClosedError(f"croupier handle {self._cell.value} was already closed")
        return self._cell.value

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def close(self) -> None:
        """Release the handle now (idempotent).

        Raises:
            CroupierError: closing the Go object failed (its error is not kept).
        """
        status = self._finalizer()
        if status and self._cell.value:
            raise error_class(status)(f"croupier: closing handle {self._cell.value} failed")


# ---------------------------------------------------------------------------
# Library-wide functions


def init(gomaxprocs: int | None = None, memory_limit: int | None = None) -> None:
    """Configure the Go runtime of this process: threads and soft memory limit.

    Environment variables such as ``GOMAXPROCS`` or ``GOMEMLIMIT`` set from Python
    after the process started never reach the Go runtime; call this instead.
    It may be called before or after the library is loaded, any number of times.

    Args:
        gomaxprocs: maximum number of OS threads running Go code at once
            (``None`` leaves Go's default, the number of CPUs).
        memory_limit: Go's soft memory limit in bytes (``None`` leaves it as is).
            Arrow batches live outside Go's heap; bound them with ``memory_budget``.
    """
    global _settings
    # Go allocates state for every processor: a huge GOMAXPROCS would exhaust memory.
    values = [
        _args.optional_integer("croupier.init: gomaxprocs", gomaxprocs, 1, 4096) or 0,
        _args.optional_integer("croupier.init: memory_limit", memory_limit) or 0,
    ]
    with _lock:
        _settings = (values[0], values[1])
    loaded = _dll is not None
    dll = _lib()  # loading calls croupier_init with _settings
    if loaded:
        _call(dll.croupier_init, *_settings)


def version() -> str:
    """Version string of the loaded Go library."""
    return (_lib().croupier_version() or b"").decode("utf-8")


def allocated_bytes() -> int:
    """Bytes of Arrow memory the Go core has allocated and not yet freed."""
    return int(_lib().croupier_allocated_bytes())


def goroutines() -> int:
    """Goroutines alive in the Go core now; with :func:`allocated_bytes`, for leak checks."""
    return int(_lib().croupier_goroutines())


def gomaxprocs() -> int:
    """The Go runtime's GOMAXPROCS now: the threads running Go code at once
    (see :func:`init`)."""
    return int(_lib().croupier_gomaxprocs())
