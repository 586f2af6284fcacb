"""Typed wrappers over the exports of ``libcroupier.so`` (``cabi/ABI.md``),
one function or class per export: tables, datasets and streams, following,
permutations, mixtures.

Each encodes its arguments as the C ABI takes them (JSON text, handles,
Arrow C streams) and decodes what the export returns (JSON text, a
:class:`~croupier._native.Handle`, Arrow batches and schemas).
:mod:`croupier._native` loads the library and makes the calls: interruptible,
refused after ``fork()``, errors raised as their exception classes.
"""

from __future__ import annotations

import ctypes
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import pyarrow as pa

from ._native import (
    PROGRESS,
    REWRITE_PROGRESS,
    ArrowArray,
    ArrowSchema,
    Handle,
    _BatchOut,
    _call,
    _encode,
    _ExportedStream,
    _handle_out,
    _json_out,
    _lib,
    _release_unimported,
    _str_out,
    _take_string,
)
from .errors import InvalidArgumentError

__all__ = [
    "dataset_info",
    "dataset_open",
    "stream_next",
    "stream_open",
    "table_info",
    "table_open",
    "table_open_pin",
    "table_pin",
    "table_schema",
]

# ---------------------------------------------------------------------------
# Tables


def table_open(uri: str, options: dict[str, Any] | None = None) -> Handle:
    """Open and pin a table (options of ``croupier_table_open``)."""
    return _handle_out("croupier_table_open", _encode(uri), _encode(options or {}))


def table_create(uri: str, reader: pa.RecordBatchReader, options: dict[str, Any]) -> Handle:
    """Create a croupier table from ``reader``; returns the handle of version 1."""
    stream = _ExportedStream(reader)
    return _handle_out("croupier_table_create", _encode(uri), stream.ref, _encode(options))


def table_append(uri: str, reader: pa.RecordBatchReader, options: dict[str, Any]) -> int:
    """Append ``reader`` as a new version of the table at ``uri``; returns the version."""
    stream = _ExportedStream(reader)
    version = ctypes.c_int64()
    _call(
        _lib().croupier_table_append,
        _encode(uri),
        stream.ref,
        _encode(options),
        ctypes.byref(version),
    )
    return version.value


def table_rewrite(
    table: int,
    uri: str,
    options: dict[str, Any],
    progress: Callable[[int, int, int, int], None],
) -> Handle:
    """Rewrite an open table as a croupier table at ``uri``; returns the handle of version 1.

    ``progress(rows, total_rows, bytes, total_bytes)`` is called after each row
    group of the source. An exception it raises cancels the rewrite, which
    then leaves no version at ``uri``, and is raised here. (Ctrl-C cancels it
    as any call, see :class:`croupier._native._Interruptible`.)
    """
    raised: list[BaseException] = []

    def report(rows: int, total_rows: int, done_bytes: int, total_bytes: int) -> int:
        try:
            progress(rows, total_rows, done_bytes, total_bytes)
            return 0
        except BaseException as exc:  # KeyboardInterrupt too: Go cannot raise it
            raised.append(exc)
            return 1

    try:
        return _handle_out(
            "croupier_table_rewrite",
            table,
            _encode(uri),
            _encode(options),
            REWRITE_PROGRESS(report),
        )
    finally:
        if raised:
            raise raised[0]


def table_versions(uri: str) -> list[int]:
    """Committed versions of the croupier table at ``uri``, ascending."""
    return [int(v) for v in json.loads(_str_out("croupier_table_versions", _encode(uri)))]


def table_history(uri: str) -> list[dict[str, Any]]:
    """The committed versions of the croupier table at ``uri``, with their commit
    times and rows (Go's table.VersionInfo)."""
    return cast(
        "list[dict[str, Any]]", json.loads(_str_out("croupier_table_history", _encode(uri)))
    )


def table_cleanup(uri: str, options: dict[str, Any]) -> dict[str, Any]:
    """Run retention on the table at ``uri``; returns what was deleted."""
    return cast(
        "dict[str, Any]",
        json.loads(_str_out("croupier_table_cleanup", _encode(uri), _encode(options))),
    )


def catalog_register(path: str, name: str, uri: str) -> None:
    """Record ``name`` -> ``uri`` in the catalog at ``path`` ("" for the default)."""
    _call(_lib().croupier_catalog_register, _encode(path), _encode(name), _encode(uri))


def catalog_lookup(path: str, name: str) -> str:
    """The URI registered under ``name`` in the catalog at ``path``."""
    return _str_out("croupier_catalog_lookup", _encode(path), _encode(name))


def table_open_pin(pin_json: str, options: dict[str, Any] | None = None) -> Handle:
    """Reopen exactly the version described by :func:`table_pin` (options of
    ``croupier_table_open_pin``)."""
    return _handle_out("croupier_table_open_pin", _encode(pin_json), _encode(options or {}))


def table_pin(table: int) -> str:
    """The pin of an open table, as JSON text."""
    return _json_out("croupier_table_pin", table)


def table_info(table: int) -> dict[str, Any]:
    """``{"uri", "version", "num_rows", "num_files"}`` of an open table."""
    return cast("dict[str, Any]", json.loads(_json_out("croupier_table_info", table)))


def table_schema(table: int) -> pa.Schema:
    """The Arrow schema of an open table."""
    schema = ArrowSchema()
    try:
        _call(_lib().croupier_table_schema, table, ctypes.byref(schema))
        return pa.Schema._import_from_c(ctypes.addressof(schema))
    finally:
        _release_unimported(schema)


def table_take(table: int, row_ids: Any, n: int, columns: list[str] | None) -> pa.RecordBatch:
    """The ``n`` rows at ``row_ids`` (a ``uint64_t*``) of an open table, in that order."""
    with _BatchOut(None) as out:
        fn = _lib().croupier_table_take
        _call(fn, table, row_ids, n, _encode(json.dumps(columns)), *out.args())
        return out.batch()


# ---------------------------------------------------------------------------
# Datasets and streams


def dataset_open(table: int, options: dict[str, Any]) -> Handle:
    """Open a dataset over a table with the options of ``croupier_dataset_open``."""
    return _handle_out("croupier_dataset_open", table, _encode(options))


def dataset_info(dataset: int) -> dict[str, Any]:
    """The JSON info of ``croupier_dataset_info`` as a dict."""
    return cast("dict[str, Any]", json.loads(_json_out("croupier_dataset_info", dataset)))


def dataset_step(dataset: int, epoch: int, step: int) -> list[list[int]]:
    """Every rank's row ids of global step ``step`` of ``epoch``, rank by rank."""
    return cast(
        "list[list[int]]", json.loads(_str_out("croupier_dataset_step", dataset, epoch, step))
    )


def dataset_epoch_steps(dataset: int, epoch: int) -> int:
    """The global steps of ``epoch`` (``croupier_dataset_epoch_steps``)."""
    steps = ctypes.c_int64()
    _call(_lib().croupier_dataset_epoch_steps, dataset, epoch, ctypes.byref(steps))
    return steps.value


def stream_open(dataset: int, options: dict[str, Any]) -> Handle:
    """Open a stream of one rank's batches (options of ``croupier_stream_open``)."""
    return _handle_out("croupier_stream_open", dataset, _encode(options))


def merge_shared(
    parts: Sequence[pa.RecordBatch], steps: int, schema: pa.Schema | None = None
) -> tuple[pa.RecordBatch, list[int]]:
    """The workers' ``parts`` of ``steps`` consecutive steps of streams that share
    steps, merged: the rank's rows of the steps, in order, and the rows of each.

    Each part has the stream's ``croupier.places`` column last, its steps
    counted from the first of the steps (see ``croupier_merge_shared``);
    ``schema``, the merged batches' (the parts' without it), if known, spares
    exporting and importing it.
    """
    stream = _ExportedStream(pa.RecordBatchReader.from_batches(parts[0].schema, parts))
    sizes = (ctypes.c_int64 * steps)()
    with _BatchOut(schema) as out:
        _call(_lib().croupier_merge_shared, stream.ref, steps, *out.args(), sizes)
        return out.batch(), list(sizes)


def stream_next(
    stream: int, schema: pa.Schema | None = None
) -> tuple[int, int, pa.RecordBatch] | None:
    """The next ``(first global step, steps, record batch)`` of a stream, or None at its end.

    ``steps`` is 1 unless the stream coalesces steps (see ``croupier_stream_next``).
    ``schema``, the schema of a batch the stream returned before (they all
    have the same), spares exporting and importing it again.
    """
    step, steps = ctypes.c_int64(-1), ctypes.c_int64(0)
    with _BatchOut(schema) as out:
        fn = _lib().croupier_stream_next
        _call(fn, stream, *out.args(), ctypes.byref(step), ctypes.byref(steps))
        if step.value < 0:
            return None
        return step.value, steps.value, out.batch()


def stream_stats(stream: int) -> dict[str, int]:
    """The counters of an open stream (``croupier_stream_stats``), without its hint."""
    stats: dict[str, int] = json.loads(_json_out("croupier_stream_stats", stream))
    stats.pop("layout_hint", None)
    return stats


def stream_run_end(stream: int, first: int, most: int, nbytes: int) -> int:
    """Where a run of steps from ``first`` ends: after at most ``most`` steps, and
    before a step that takes its guessed bytes above ``nbytes`` unless it is the
    run's first (``croupier_stream_run_end``)."""
    end = ctypes.c_int64()
    _call(_lib().croupier_stream_run_end, stream, first, most, nbytes, ctypes.byref(end))
    return end.value


def stream_hint(stream: int) -> str:
    """The layout hint in an open stream's stats (``croupier_stream_stats``), or ""."""
    return str(json.loads(_json_out("croupier_stream_stats", stream)).get("layout_hint", ""))


def follow_open(table: int, options: dict[str, Any]) -> Handle:
    """Open a follower of a croupier table (options of ``croupier_follow_open``)."""
    return _handle_out("croupier_follow_open", table, _encode(options))


def follow_info(follower: int) -> dict[str, Any]:
    """The JSON info of ``croupier_follow_info`` as a dict."""
    return cast("dict[str, Any]", json.loads(_json_out("croupier_follow_info", follower)))


def follow_stream_open(follower: int, options: dict[str, Any]) -> Handle:
    """Open a follow stream (options of ``croupier_follow_stream_open``)."""
    return _handle_out("croupier_follow_stream_open", follower, _encode(options))


def follow_round(stream: int) -> dict[str, Any]:
    """The round of a follow stream's last batch (``croupier_follow_round``)."""
    return cast("dict[str, Any]", json.loads(_json_out("croupier_follow_round", stream)))


def follow_steps(
    follower: int, position: dict[str, Any], start: int, stop: int
) -> list[dict[str, Any]]:
    """Global steps ``start`` to ``stop - 1`` of following, every rank's rows and
    their versions, the rounds formed from ``position`` (``croupier_follow_steps``)."""
    return cast(
        "list[dict[str, Any]]",
        json.loads(_str_out("croupier_follow_steps", follower, _encode(position), start, stop)),
    )


def dataset_open_split(permutation: int, split: int, options: dict[str, Any]) -> Handle:
    """Open a dataset over split ``split`` of an open permutation."""
    return _handle_out("croupier_dataset_open_split", permutation, split, _encode(options))


# ---------------------------------------------------------------------------
# Permutations


def _build_progress(progress: Callable[[str, int, int, int, int], None] | None) -> Any:
    """The C progress callback of a build that calls ``progress``, or NULL."""
    if progress is None:
        return PROGRESS(0)

    def report(phase: bytes, done: int, total: int, kept: int, nbytes: int) -> None:
        progress(phase.decode(), done, total, kept, nbytes)

    return PROGRESS(report)


def permutation_build(
    table: int,
    spec: dict[str, Any],
    uri: str,
    options: dict[str, Any],
    progress: Callable[[str, int, int, int, int], None] | None,
) -> Handle:
    """Build and persist a permutation (options of ``croupier_permutation_build``).

    ``progress(phase, done, total, kept, bytes)`` may be None.
    """
    callback = _build_progress(progress)
    return _handle_out(
        "croupier_permutation_build",
        table,
        _encode(spec),
        _encode(uri),
        _encode(options),
        callback,
    )


class BuildRank:
    """One rank of a distributed build (``croupier_permutation_rank_open``),
    holding its progress callback while Go may call it."""

    def __init__(
        self,
        table: int,
        spec: dict[str, Any],
        uri: str,
        options: dict[str, Any],
        progress: Callable[[str, int, int, int, int], None] | None,
    ) -> None:
        self._callback = _build_progress(progress)
        self.handle = _handle_out(
            "croupier_permutation_rank_open",
            table,
            _encode(spec),
            _encode(uri),
            _encode(options),
            self._callback,
        )

    def next(self, gathered: list[str] | None) -> tuple[str | None, Handle | None]:
        """Run the rank's next step with every rank's report of the step before;
        returns this rank's report, or None and the permutation once committed."""
        report = ctypes.c_void_p()
        perm = Handle()
        arg = None if gathered is None else _encode("[" + ",".join(gathered) + "]")
        _call(
            _lib().croupier_permutation_rank_next,
            self.handle.value,
            arg,
            ctypes.byref(report),
            ctypes.byref(perm._cell),
        )
        if report.value:
            return _take_string(report), None
        return None, perm

    def close(self) -> None:
        self.handle.close()


def permutation_open(uri: str, options: dict[str, Any] | None = None) -> Handle:
    """Open a persisted permutation (options of ``croupier_permutation_open``)."""
    return _handle_out("croupier_permutation_open", _encode(uri), _encode(options or {}))


def permutation_info(permutation: int) -> dict[str, Any]:
    """``{"uri", "manifest"}`` of an open permutation."""
    return cast("dict[str, Any]", json.loads(_json_out("croupier_permutation_info", permutation)))


def permutation_row_ids(permutation: int, split: int, start: int, stop: int, dst: Any) -> None:
    """Fill ``dst`` (a uint64 pointer to ``stop - start`` slots) with a split's row ids."""
    _call(_lib().croupier_permutation_row_ids, permutation, split, start, stop, dst)


# ---------------------------------------------------------------------------
# Mixtures


def mixture_open(datasets: list[int], options: dict[str, Any]) -> Handle:
    """Open the mixture of open datasets (options of ``croupier_mixture_open``)."""
    handles = (ctypes.c_uint64 * len(datasets))(*datasets)
    return _handle_out("croupier_mixture_open", handles, len(datasets), _encode(options))


def mixture_plan(mixture: int, position: dict[str, Any], steps: int) -> dict[str, Any]:
    """``{"steps", "ended", "position"}``: the slots of up to ``steps`` mixture
    steps from ``position`` and the position after them (``croupier_mixture_plan``)."""
    return cast(
        "dict[str, Any]",
        json.loads(_str_out("croupier_mixture_plan", mixture, _encode(position), steps)),
    )


def source_checkpoint(source: int, position: dict[str, Any]) -> dict[str, Any]:
    """The state dict of a dataset or follower at ``position`` (its cursor:
    ``{"epoch", "steps_consumed"}``, with ``"worker_position"`` or a follower's
    ``"round"``), as the Go core builds it (``croupier_source_checkpoint``)."""
    return cast(
        "dict[str, Any]",
        json.loads(_str_out("croupier_source_checkpoint", source, _encode(position))),
    )


def source_restore(
    source: int, state_dict: Mapping[str, Any], options: dict[str, Any]
) -> dict[str, Any]:
    """The position of ``state_dict`` in a dataset or follower, checked by the Go
    core (``croupier_source_restore``); options: ``{"table_moved", "workers"}``."""
    return cast(
        "dict[str, Any]",
        json.loads(
            _str_out("croupier_source_restore", source, state_json(state_dict), _encode(options))
        ),
    )


def state_json(state_dict: Mapping[str, Any]) -> bytes:
    """The JSON of a state dict, for the Go core to check: what JSON cannot carry
    (NaN, infinities, objects of other types) is refused naming its key."""
    if not isinstance(state_dict, Mapping):
        raise InvalidArgumentError(f"state dict must be a mapping, got {type(state_dict).__name__}")
    for key, value in state_dict.items():
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"state dict {key} is {value!r}, but it must be a JSON value (a number, "
                "string, bool, null, list or dict)"
            ) from None
    return json.dumps(dict(state_dict), allow_nan=False).encode("utf-8")


def mixture_end(mixture: int, position: dict[str, Any]) -> dict[str, Any]:
    """Where the iteration after one that ended at ``position`` starts: sources
    whose epoch ended at their next one, none out of the draw
    (``croupier_mixture_end``); it waits for no source."""
    return cast(
        "dict[str, Any]", json.loads(_str_out("croupier_mixture_end", mixture, _encode(position)))
    )


def mixture_weights(mixture: int, step: int) -> list[float]:
    """The weights of a mixture's sources at ``step``."""
    return cast("list[float]", json.loads(_str_out("croupier_mixture_weights", mixture, step)))


def mixture_checkpoint(mixture: int, position: dict[str, Any]) -> dict[str, Any]:
    """The state dict of a mixture at ``position``."""
    return cast(
        "dict[str, Any]",
        json.loads(_str_out("croupier_mixture_checkpoint", mixture, _encode(position))),
    )


def mixture_resume(mixture: int, state: Mapping[str, Any]) -> dict[str, Any]:
    """The position a mixture state dict records, once checked against the mixture."""
    return cast(
        "dict[str, Any]",
        json.loads(_str_out("croupier_mixture_resume", mixture, state_json(state))),
    )


def mixture_stream_open(mixture: int, position: dict[str, Any], options: dict[str, Any]) -> Handle:
    """Open a stream of one worker's mixture steps from ``position``."""
    return _handle_out("croupier_mixture_stream_open", mixture, _encode(position), _encode(options))


def mixture_stream_next(
    stream: int, records: int
) -> tuple[int, dict[str, Any], list[pa.RecordBatch]] | None:
    """The next ``(mixture step, {"slots", "records", "next"}, record batches)`` of
    a mixture stream, or None at its end: a batch per slot that no mixture
    fills, depth first; ``records`` is at least the most a step holds."""
    arrays, schemas = (ArrowArray * records)(), (ArrowSchema * records)()
    step, out = ctypes.c_int64(-1), ctypes.c_void_p()
    try:
        try:
            _call(
                _lib().croupier_mixture_stream_next,
                stream,
                records,
                arrays,
                schemas,
                ctypes.byref(step),
                ctypes.byref(out),
            )
        finally:
            text = _take_string(out)
        if step.value < 0:
            return None
        info = json.loads(text)
        batches = [
            pa.RecordBatch._import_from_c(ctypes.addressof(a), ctypes.addressof(s))
            for a, s in zip(arrays[: info["records"]], schemas[: info["records"]], strict=True)
        ]
        return step.value, info, batches
    finally:
        for a, s in zip(arrays, schemas, strict=True):
            _release_unimported(a)
            _release_unimported(s)
