"""Tables: a pinned, immutable version of a set of Parquet files."""

from __future__ import annotations

import ctypes
import datetime
import itertools
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeAlias

import numpy as np
import pyarrow as pa

from . import _args, _lib, _native, _progress
from .errors import ClosedError, InternalError, InvalidArgumentError

__all__ = ["Table", "cleanup", "create_table", "lookup", "open_table", "register", "rewrite"]


class ArrowStreamExportable(Protocol):
    """Any object that exports its rows as an Arrow C stream: the Arrow
    PyCapsule interface (polars and DuckDB frames, nanoarrow streams, …)."""

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object: ...


TableData: TypeAlias = (
    ArrowStreamExportable
    | pa.Table
    | pa.RecordBatch
    | pa.RecordBatchReader
    | Iterable[pa.RecordBatch]
)


def _reader(data: TableData) -> pa.RecordBatchReader:
    """Any supported data as one RecordBatchReader."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        return data.to_reader()
    if hasattr(data, "__arrow_c_stream__"):  # polars, DuckDB, nanoarrow, …
        return pa.RecordBatchReader.from_stream(data)
    batches: Iterator[pa.RecordBatch] = iter(data)
    try:
        first = next(batches)
    except StopIteration:
        raise InvalidArgumentError(
            "no data: an empty iterable of batches has no schema (pass a pyarrow Table)"
        ) from None
    return pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], batches))


# A time as Go's JSON writes it: RFC 3339 with up to 9 digits of fraction.
_RFC3339 = re.compile(r"([^.]+?)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)")


def _parse_time(text: str) -> datetime.datetime:
    """``text``, a time as Go's JSON writes it, as an aware datetime
    (microseconds: Python's datetime holds no finer)."""
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise InternalError(f"the core wrote the time {text!r}, which is not RFC 3339")
    base, fraction, zone = m.groups()
    micros = (fraction or "")[:6].ljust(6, "0")
    return datetime.datetime.fromisoformat(f"{base}.{micros}{'+00:00' if zone == 'Z' else zone}")


def _write_options(
    row_group_rows: int | None,
    page_bytes: int | None,
    catalog: str | os.PathLike[str] | None,
    trust_conditional_writes: bool = False,
    compression: str | None = None,
) -> dict[str, Any]:
    options = {
        "row_group_rows": _args.optional_integer("row_group_rows", row_group_rows),
        "page_bytes": _args.optional_integer("page_bytes", page_bytes),
        "compression": None if compression is None else _args.text("compression", compression),
        "catalog": None if catalog is None else _args.local_path("catalog", catalog),
        "trust_conditional_writes": bool(trust_conditional_writes),
    }
    return {k: v for k, v in options.items() if v}


def _cache_options(
    cache_dir: str | os.PathLike[str] | None, cache_bytes: int | None
) -> dict[str, Any]:
    """The disk cache options of a table opened for reading: ``cache_dir`` and
    ``cache_bytes`` where given, else the environment's, else the defaults
    (see :func:`open_table`). They are resolved here, as the Go runtime does
    not see variables set after the process started."""
    if cache_dir is None:
        cache_dir = os.environ.get("CROUPIER_CACHE_DIR")
    if cache_dir is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        cache_dir = os.path.join(base, "croupier", "blocks")
    folder = _args.text(
        "cache_dir", os.fspath(cache_dir) if isinstance(cache_dir, os.PathLike) else cache_dir
    )
    if folder == "":
        return {}
    options: dict[str, Any] = {"cache_dir": os.path.abspath(os.path.expanduser(folder))}
    if cache_bytes is None:
        env = os.environ.get("CROUPIER_CACHE_BYTES", "")
        if env != "":
            try:
                cache_bytes = int(env)
            except ValueError:
                raise InvalidArgumentError(
                    f"CROUPIER_CACHE_BYTES must be a number of bytes, got {env!r}"
                ) from None
            options["cache_bytes"] = _args.integer("CROUPIER_CACHE_BYTES", cache_bytes, 1)
    else:
        options["cache_bytes"] = _args.integer("cache_bytes", cache_bytes, 1)
    return options


def create_table(
    uri: _args.Where,
    data: TableData,
    *,
    row_group_rows: int | None = None,
    page_bytes: int | None = None,
    compression: str | None = None,
    trust_conditional_writes: bool = False,
) -> Table:
    """Create a croupier table at ``uri`` whose version 1 holds ``data``.

    ``data`` is a pyarrow Table, RecordBatch, RecordBatchReader, an iterable of
    record batches, or any object with ``__arrow_c_stream__`` (the Arrow PyCapsule
    interface: polars and DuckDB frames, nanoarrow streams); its schema becomes the
    table's. Data files are Parquet with a page index, in row groups of
    ``row_group_rows`` rows (default 4,096, chosen for reads of single rows) and
    pages of ``page_bytes`` (default 16 KiB), compressed with ``compression``:
    ``"lz4"`` (the default: pages that decode several times faster than zstd's,
    which a shuffle of a table many memory budgets large does many times an epoch;
    see docs/tuning.md), ``"zstd"`` (files 1.3 to 1.6 times smaller, for tables read
    mostly in order or kept for their size) or ``"none"``.

    Before a process's first commit to a store, croupier checks that the store
    honours conditional writes (a second exclusive create of one key must
    fail), and refuses to commit where it does not: concurrent commits there
    would overwrite each other's versions. ``trust_conditional_writes=True``
    skips the check, for a store you know honours them or a table only one
    writer ever commits to (see docs/storage.md).

    Raises:
        AlreadyExistsError: a croupier table already exists at ``uri``.
        InvalidArgumentError: the store ignores conditional writes, or
            ``compression`` is none of those above.
    """
    reader = _reader(data)
    options = _write_options(
        row_group_rows, page_bytes, None, trust_conditional_writes, compression
    )
    handle = _lib.table_create(_args.uri("uri", uri), reader, options)
    return Table._from_handle(handle)


def open_table(
    uri: _args.Where,
    version: int | str | None = None,
    *,
    catalog: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_bytes: int | None = None,
) -> Table:
    """Open a table and pin a version of it.

    Args:
        uri: where the table lives. A croupier table (created by
            :func:`create_table`), or a plain Parquet dataset: a folder or prefix
            (``file:///data/rollouts``), one file or a glob
            (``file:///data/*.parquet``). A local path (a string without
            ``://``, or a :class:`pathlib.Path`) is taken as the ``file://``
            URI of its absolute path, here and wherever croupier takes a URI.
            Plain Parquet datasets are pinned at open: every file's path,
            size, modification time and ETag is recorded and later reads
            check them.
        version: ``None`` for the latest version; for a croupier table, a
            version number (see :meth:`Table.versions`), as an int or a string
            (``3`` or ``"3"``, as checkpoints hold it). A plain Parquet dataset
            has only the version it has now, so any other value must equal that
            version's string.
        catalog: path of a local catalog file caching Parquet footers and
            manifests, so that reopening a dataset of thousands of files reads
            none of them again (the object store stays the authority).
        cache_dir: folder of the disk cache that keeps the bytes read of the
            data files of a remote store (``s3://``, ``gs://``,
            ``azblob://``), so that later epochs, and every process of the
            node, read them from local disk (see docs/storage.md, "The disk
            cache"). ``None`` is ``$CROUPIER_CACHE_DIR`` if set, else
            ``$XDG_CACHE_HOME/croupier/blocks``, else
            ``~/.cache/croupier/blocks``; ``""`` (or
            ``CROUPIER_CACHE_DIR=""``) reads every byte from the store. Local
            files are never cached.
        cache_bytes: the bound of the folder, in bytes; ``None`` is
            ``$CROUPIER_CACHE_BYTES`` if set, else 64 GiB or half the space
            free on its filesystem, whichever is less. Copies of the table
            (pickled, in DataLoader workers) keep both settings.

    Raises:
        NotFoundError: nothing exists at ``uri``, or the version does not.
        CorruptError: a file is not readable Parquet (the message names it).
        InvalidArgumentError: ``version`` is not one of the table's.
    """
    uri = _args.uri("uri", uri)
    cache = _cache_options(cache_dir, cache_bytes)
    options: dict[str, Any] = {**_write_options(None, None, catalog), **cache}
    if isinstance(version, str) and version.isdecimal():
        version = int(version)  # a croupier table's version, as checkpoints write it
    if version is not None and not isinstance(version, str):
        options["version"] = _args.integer("version", version, 1)
    table = Table._from_handle(_lib.table_open(uri, options), cache)
    if isinstance(version, str) and version != table.version:
        table.close()
        raise InvalidArgumentError(
            f"open_table({uri!r}, version={version!r}): the table's current version is "
            f"{table.version!r}; older versions of a plain Parquet dataset cannot be opened"
        )
    return table


RewriteProgress = Callable[[int, int, int, int], None]


def rewrite(
    src: _args.Where | Table,
    dst_uri: _args.Where,
    *,
    columns: Sequence[str] | None = None,
    row_group_rows: int | None = None,
    page_bytes: int | None = None,
    compression: str | None = None,
    memory_budget: int | None = None,
    progress: RewriteProgress | bool | None = None,
    trust_conditional_writes: bool = False,
) -> Table:
    """Rewrite a table as a croupier table at ``dst_uri``, laid out for shuffled reads.

    A shuffled read decodes a whole row group for each row it takes, so the
    large row groups that pyarrow, Spark or a Hugging Face export write make
    every random row expensive. This copies the rows of ``src``, in row id
    order, into row groups of ``row_group_rows`` rows (default 4,096) and pages
    of ``page_bytes`` (default 16 KiB) with a page index, compressed with
    ``compression`` (default lz4; see :func:`create_table`). It
    reads ``src`` in slices of consecutive rows, decoding only the pages each
    slice needs, so it holds about ``memory_budget`` bytes however large
    ``src`` and its row groups are.

    ``dst_uri`` gets its version 1 only once every row is written: a rewrite
    that fails or is interrupted (Ctrl-C, or an exception raised by
    ``progress``) leaves no version there and may be run again.

    Args:
        src: a URI (a plain Parquet dataset, or a croupier table at its latest
            version), read without the disk cache, or an open :class:`Table`
            (its pinned version).
        dst_uri: where to create the new table.
        columns: the columns to keep, in that order; ``None`` keeps them all.
        row_group_rows: most rows in one row group.
        page_bytes: target size of one data page.
        compression: ``"lz4"``, ``"zstd"`` or ``"none"`` (see :func:`create_table`).
        memory_budget: bytes of ``src``'s rows held decoded at once (default
            256 MiB): a slice takes a quarter of it at the rows' guessed size,
            and one row at least.
        progress: ``callable(rows, total_rows, bytes, total_bytes)``, called
            after each slice of ``src`` (bytes: compressed bytes of the
            kept columns, as ``src``'s footers record them); ``True`` shows a
            tqdm bar on stderr when tqdm is installed, else a line per tenth of
            the rows; ``None`` or ``False`` shows nothing.
        trust_conditional_writes: skip the check that the store honours
            conditional writes (see :func:`create_table`).

    Returns:
        The new table, at version 1.

    Raises:
        AlreadyExistsError: a croupier table already exists at ``dst_uri``.
        InvalidArgumentError: a column is not in ``src``.
    """
    if isinstance(columns, str):
        raise TypeError(f"rewrite: columns is a sequence of names, not the string {columns!r}")
    options = _write_options(
        row_group_rows, page_bytes, None, trust_conditional_writes, compression
    )
    if columns is not None:
        options["columns"] = [str(c) for c in columns]
    if memory_budget is not None:
        options["memory_budget"] = _args.integer("memory_budget", memory_budget, low=1)
    display = (_progress.tqdm_bars() or _progress.stderr_lines()) if progress is True else None

    def report(rows: int, total_rows: int, done_bytes: int, total_bytes: int) -> None:
        if display is not None:
            display[0]("rewrite", rows, total_rows)
        elif callable(progress):
            progress(rows, total_rows, done_bytes, total_bytes)

    # A rewrite reads its source once: its blocks would only crowd the disk cache.
    dst = _args.uri("dst_uri", dst_uri)
    table = src if isinstance(src, Table) else open_table(src, cache_dir="")
    try:
        handle = _lib.table_rewrite(table._handle(), dst, options, report)
    finally:
        if display is not None:
            display[1]()
        if table is not src:
            table.close()
    return Table._from_handle(handle)


def cleanup(uri: _args.Where, keep_last: int, *, grace: float | None = None) -> dict[str, Any]:
    """Delete old versions of the croupier table at ``uri``, keeping the last ``keep_last``.

    Versions younger than ``grace`` seconds (default: a day; 0: none) are kept
    too, and only data files that no kept version references and that are
    older than ``grace`` are deleted: this protects appends in flight, which
    must take less than ``grace``. On S3 it also aborts the incomplete
    multipart uploads under the table's folder started before ``grace`` (left
    by writers killed while uploading). Returns ``{"deleted_versions": [...],
    "deleted_files": [...], "aborted_uploads": [...], "warnings": [...]}``;
    ``warnings`` says what could not be done after the deletions, such as
    listing the uploads on a store that refuses to.
    """
    options: dict[str, Any] = {"keep_last": _args.integer("keep_last", keep_last, 1)}
    if grace is not None:
        # Go's time.Duration in nanoseconds, where 0 would mean the default
        seconds = _args.number("grace", grace, 0.0, 9e9)  # within int64 nanoseconds
        options["grace"] = max(int(seconds * 1e9), 1)
    return _lib.table_cleanup(_args.uri("uri", uri), options)


def register(name: str, uri: _args.Where, *, catalog: str | os.PathLike[str] | None = None) -> None:
    """Remember ``uri`` under ``name`` in the local catalog.

    The default catalog is ``$XDG_CACHE_HOME/croupier/catalog.db``, else
    ``~/.cache/croupier/catalog.db``.
    """
    path = "" if catalog is None else _args.local_path("catalog", catalog)
    _lib.catalog_register(path, _args.text("name", name), _args.uri("uri", uri))


def lookup(name: str, *, catalog: str | os.PathLike[str] | None = None) -> str:
    """The URI registered under ``name``; NotFoundError if there is none."""
    path = "" if catalog is None else _args.local_path("catalog", catalog)
    return _lib.catalog_lookup(path, _args.text("name", name))


class Table(_native.Closeable):
    """One pinned version of a table. Create it with :func:`open_table`.

    A table is cheap to pickle: the pickle carries its pin (paths, sizes and
    ETags of its files) and its disk cache settings, and the copy reopens
    exactly that version on first use in the new process, failing with
    :class:`~croupier.ChangedError` if a file changed meanwhile.

    Close it with :meth:`close` or a ``with`` block; otherwise it is released when
    garbage-collected. Datasets opened from a table stay usable after it closes.
    """

    _handle_obj: _native.Handle | None
    _pin: str | None
    _cache: dict[str, Any]  # the disk cache options it was opened with, for copies
    _info: dict[str, Any]
    _schema: pa.Schema | None
    _closed: bool

    def __init__(self) -> None:
        raise TypeError("use croupier.open_table(uri) to open a table")

    @classmethod
    def _from_handle(cls, handle: _native.Handle, cache: dict[str, Any] | None = None) -> Table:
        """The table of a Go handle opened with the disk cache options ``cache``."""
        self = cls.__new__(cls)
        self._setup(handle, pin=None, info=_lib.table_info(handle.value), cache=cache or {})
        return self

    @classmethod
    def _from_pin(cls, pin: str, cache: dict[str, Any]) -> Table:
        """Open exactly the version a pin (JSON text) describes."""
        handle = _lib.table_open_pin(pin, cache)
        self = cls.__new__(cls)
        self._setup(handle, pin=pin, info=_lib.table_info(handle.value), cache=cache)
        return self

    def _setup(
        self,
        handle: _native.Handle | None,
        pin: str | None,
        info: dict[str, Any],
        cache: dict[str, Any],
    ) -> None:
        self._handle_obj = handle
        self._pin = pin
        self._cache = cache
        self._info = info
        self._schema = None
        self._closed = False
        self._lock = threading.Lock()

    # -- pickling: carry the pin, reopen lazily -------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {"pin": self._pin_json(), "info": self._info, "cache": self._cache}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._setup(None, pin=state["pin"], info=state["info"], cache=state["cache"])

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
                self._handle_obj = _lib.table_open_pin(self._pin, self._cache)
            return self._handle_obj.value

    # -- public API --------------------------------------------------------------

    @property
    def uri(self) -> str:
        """The URI the table was opened with."""
        return str(self._info["uri"])

    @property
    def version(self) -> int | str:
        """The pinned version: a number for croupier tables, a string derived from
        the pin for plain Parquet datasets."""
        v = str(self._info["version"])
        return int(v) if v.isdigit() else v

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

    def append(
        self,
        data: TableData,
        *,
        row_group_rows: int | None = None,
        compression: str | None = None,
        trust_conditional_writes: bool = False,
    ) -> int:
        """Append ``data`` to this croupier table as a new version; returns its number.

        Atomic, and safe from many processes at once: a writer that loses the
        race for a version number retries on the next. The schema must equal
        the table's. This object stays pinned at its own version; open the
        table again to read the new one. ``compression`` is the new files'
        codec (see :func:`create_table`). ``trust_conditional_writes`` skips
        the check that the store honours conditional writes (see
        :func:`create_table`).

        Raises:
            InvalidArgumentError: ``data`` has no row (a version is made of
                new rows: no version is made), or the store ignores
                conditional writes.
            ChangedError: the store replaced this commit's manifest after
                accepting it (it ignores conditional writes).
        """
        reader = _reader(data)
        options = _write_options(row_group_rows, None, None, trust_conditional_writes, compression)
        return _lib.table_append(self.uri, reader, options)

    def take(self, row_ids: Iterable[int], columns: Sequence[str] | None = None) -> pa.Table:
        """The rows with the given ids, in that order, as a pyarrow Table.

        For provenance: the rows a step trained on (``ds.rows_of_step(t)``), with
        the columns that say where they came from (``rollout_id``,
        ``policy_version``). Ids may repeat; each row group they touch is read
        once.

        Args:
            row_ids: row ids of this pinned version (a list or an integer
                numpy array).
            columns: the columns to read, in that order (all if None).

        Raises:
            InvalidArgumentError: an id is negative or outside the table, or a
                column is unknown.
        """
        ids = np.asarray(row_ids if isinstance(row_ids, np.ndarray) else list(row_ids))
        if ids.size and ids.dtype.kind not in "iu":
            raise InvalidArgumentError(f"row_ids must be integers, got an array of {ids.dtype}")
        if ids.size and ids.min() < 0:
            raise InvalidArgumentError(f"row_ids must be >= 0, got {ids.min()}")
        ids = np.ascontiguousarray(ids, dtype=np.uint64).ravel()
        cols = None if columns is None else _args.strings("columns", columns)
        batch = _lib.table_take(
            self._handle(), ids.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)), len(ids), cols
        )
        return pa.Table.from_batches([batch])

    def versions(self) -> list[int]:
        """The committed versions of this croupier table, ascending."""
        return _lib.table_versions(self.uri)

    def history(self) -> list[dict[str, Any]]:
        """The committed versions of this croupier table, ascending, each as
        ``{"version": int, "committed": datetime, "num_rows": int,
        "added_rows": int}``: when its writer committed it (its clock, UTC),
        its rows, and the rows it added to the version before it. One read of
        each version's manifest."""
        return [
            {**v, "committed": _parse_time(v["committed"])} for v in _lib.table_history(self.uri)
        ]

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return (
            f"<croupier.Table {self.uri} version={self.version!r} "
            f"num_rows={self.num_rows} num_files={self.num_files}{state}>"
        )
