"""Tables: a pinned, immutable version of a set of Parquet files."""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

import pyarrow as pa

from . import _lib
from .errors import ClosedError, InvalidArgumentError

__all__ = ["Table", "open_table"]


def open_table(uri: str, version: int | str | None = None) -> Table:
    """Open a table and pin its current version.

    Args:
        uri: where the table lives, e.g. ``file:///data/rollouts`` (a folder or prefix),
            ``file:///data/part-0.parquet`` (one file) or ``file:///data/*.parquet``
            (a glob). Plain Parquet datasets are pinned at open: every file's path,
            size and ETag/generation is recorded and later reads check them.
        version: ``None`` for the latest version. A plain Parquet dataset has only
            the version it has now, so any other value must equal that version's
            string (older versions of plain Parquet cannot be opened).

    Raises:
        NotFoundError: nothing exists at ``uri``.
        CorruptError: a file is not readable Parquet (the message names it).
        InvalidArgumentError: ``version`` is not the table's current version.
    """
    table = Table._from_handle(_lib.Handle(_lib.table_open(uri)))
    if version is not None and str(version) != table.version:
        table.close()
        raise InvalidArgumentError(
            f"open_table({uri!r}, version={version!r}): {uri} is a plain Parquet dataset whose "
            f"current version is {table.version!r}; opening another version of a plain Parquet "
            "dataset is not supported (pass version=None)"
        )
    return table


class Table:
    """One pinned version of a table. Create it with :func:`open_table`.

    A table is cheap to pickle: the pickle carries its pin (paths, sizes and
    ETags of its files), and the copy reopens exactly that version on first use
    in the new process, failing with :class:`~croupier.ChangedError` if a file
    changed meanwhile.

    Close it with :meth:`close` or a ``with`` block; otherwise it is released when
    garbage-collected. Datasets opened from a table stay usable after it closes.
    """

    _handle_obj: _lib.Handle | None
    _pin: str | None
    _info: dict[str, Any]
    _schema: pa.Schema | None
    _closed: bool

    def __init__(self) -> None:
        raise TypeError("use croupier.open_table(uri) to open a table")

    @classmethod
    def _from_handle(cls, handle: _lib.Handle) -> Table:
        self = cls.__new__(cls)
        self._setup(handle, pin=None, info=_lib.table_info(handle.value))
        return self

    @classmethod
    def _from_pin(cls, pin: str) -> Table:
        """Open exactly the version a pin (JSON text) describes."""
        handle = _lib.Handle(_lib.table_open_pin(pin))
        self = cls.__new__(cls)
        self._setup(handle, pin=pin, info=_lib.table_info(handle.value))
        return self

    def _setup(self, handle: _lib.Handle | None, pin: str | None, info: dict[str, Any]) -> None:
        self._handle_obj = handle
        self._pin = pin
        self._info = info
        self._schema = None
        self._closed = False
        self._lock = threading.Lock()

    # -- pickling: carry the pin, reopen lazily -------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"pin": self._pin_json(), "info": self._info}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._setup(None, pin=state["pin"], info=state["info"])

    def _pin_json(self) -> str:
        """The pin as JSON text (fetched once, then cached)."""
        if self._pin is None:
            self._pin = _lib.table_pin(self._handle())
        return self._pin

    def _handle(self) -> int:
        """The raw Go handle, reopening the pinned version on first use after unpickling."""
        with self._lock:
            if self._closed:
                raise ClosedError(f"table {self.uri} (version {self.version}) is closed")
            if self._handle_obj is None:
                assert self._pin is not None
                self._handle_obj = _lib.Handle(_lib.table_open_pin(self._pin))
            return self._handle_obj.value

    # -- public API --------------------------------------------------------------

    @property
    def uri(self) -> str:
        """The URI the table was opened with."""
        return str(self._info["uri"])

    @property
    def version(self) -> str:
        """The pinned version (for plain Parquet: a string derived from the pin)."""
        return str(self._info["version"])

    @property
    def num_rows(self) -> int:
        """Number of rows in the pinned version."""
        return int(self._info["num_rows"])

    @property
    def num_files(self) -> int:
        """Number of Parquet files in the pinned version."""
        return int(self._info["num_files"])

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema of the table."""
        if self._schema is None:
            self._schema = _lib.table_schema(self._handle())
        return self._schema

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Release the table's Go handle (idempotent)."""
        with self._lock:
            self._closed = True
            if self._handle_obj is not None:
                self._handle_obj.close()

    def __enter__(self) -> Table:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return (
            f"<croupier.Table {self.uri} version={self.version!r} "
            f"num_rows={self.num_rows} num_files={self.num_files}{state}>"
        )
