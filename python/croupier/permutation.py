"""Permutations: a persisted, immutable order of a pinned table's rows, in splits.

A :class:`PermutationBuilder` prefilters a table with a SQL expression, assigns
the kept rows to named splits (train/val/...) and shuffles each split, once;
:meth:`PermutationBuilder.persist` writes the result under a URI. Any process
on any host then opens it with :func:`open_permutations` and deals from one of
its splits with :class:`~croupier.StreamingDataset`. The same inputs give the
same permutation, byte for byte, on every platform: the random generators and
hashes are specified in the Go package ``permutation``.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, NoReturn, cast

import numpy as np

from . import _args, _lib, _native, _progress, _torch
from .errors import ClosedError, CroupierError, InvalidArgumentError, UnavailableError
from .table import Table, _cache_options

# The clump size of page-aligned clumps, cut at the table's page boundaries
# (Go's permutation.AutoClump); the persisted spec records it.
AUTO_CLUMP = -1

__all__ = ["Permutation", "PermutationBuilder", "Permutations", "open_permutations"]

ProgressCallback = Callable[[str, int, int], None]


class PermutationBuilder:
    """Describes a permutation of a table; :meth:`persist` builds and writes it.

    Each method returns the builder, so calls chain::

        perms = (cr.PermutationBuilder(tbl)
                 .filter("reward > 0 AND role = 'assistant'")
                 .split_hash(["problem_id"], [9, 1], split_names=["train", "val"])
                 .shuffle(seed=1234)
                 .persist("file:///perms/run-7"))

    Without a ``split_*`` call every kept row is in one split named ``"all"``;
    without :meth:`shuffle` each split keeps row id order. :meth:`group_by`
    keeps rows sharing a key together, in every step.
    """

    def __init__(self, table: Table) -> None:
        if not isinstance(table, Table):
            raise TypeError(
                f"PermutationBuilder needs a croupier.Table, got {type(table).__name__}"
            )
        self._table = table
        self._spec: dict[str, Any] = {}

    def filter(self, sql: str) -> PermutationBuilder:
        """Keep only rows where the SQL boolean expression is true (null counts as false).

        Supports comparisons, AND/OR/NOT, IN, BETWEEN, IS [NOT] NULL, LIKE,
        arithmetic and nested fields (``meta.source``). Row groups whose
        statistics rule the expression out are not read.
        """
        self._spec["filter"] = _args.text("filter", sql)
        return self

    def _split(self, kind: str, names: Sequence[str] | None, **fields: Any) -> PermutationBuilder:
        if "split" in self._spec:
            raise InvalidArgumentError("a permutation has one split_* call; it was already given")
        spec = {"kind": kind, **{k: v for k, v in fields.items() if v is not None}}
        if names is not None:
            spec["names"] = _args.strings("split_names", names)
        self._spec["split"] = spec
        return self

    def split_random(
        self,
        *,
        ratios: Sequence[float] | None = None,
        counts: Sequence[int] | None = None,
        fixed: int | None = None,
        seed: int = 0,
        clump_size: int | None = None,
        split_names: Sequence[str] | None = None,
    ) -> PermutationBuilder:
        """Assign kept rows to splits at random (seeded), by exactly one of:

        ``ratios`` (each in [0, 1], summing to at most 1; split i ends at
        ``round(M * (r0 + ... + ri))``, halves rounding up), ``counts`` (rows per
        split; their sum must not exceed the kept rows M) or ``fixed`` (as many
        splits of ``fixed`` rows as fit). Rows beyond the splits are in none.

        With ``clump_size`` c, runs of c consecutive kept rows (in row id order)
        are assigned together, and ratios, counts and fixed count clumps.
        """
        return self._split(
            "random",
            split_names,
            **_sizes(ratios, counts, fixed),
            seed=_args.integer("seed", seed, 0, _args.UINT64_MAX),
            clump_size=_args.optional_integer("clump_size", clump_size),
        )

    def split_sequential(
        self,
        *,
        ratios: Sequence[float] | None = None,
        counts: Sequence[int] | None = None,
        fixed: int | None = None,
        split_names: Sequence[str] | None = None,
    ) -> PermutationBuilder:
        """Like :meth:`split_random`, but splits are consecutive runs in row id order."""
        return self._split("sequential", split_names, **_sizes(ratios, counts, fixed))

    def split_hash(
        self,
        columns: Sequence[str],
        weights: Sequence[int],
        *,
        discard_weight: int = 0,
        split_names: Sequence[str] | None = None,
    ) -> PermutationBuilder:
        """Assign rows by a hash of the named columns' values, in proportion to ``weights``.

        A row's split depends only on its values, so it keeps its split in every
        later version of the table (no train/val leakage on append). Rows whose
        hash lands in ``discard_weight`` are in no split.
        """
        if isinstance(columns, str):
            columns = [columns]
        if isinstance(weights, Sequence) and any(isinstance(w, float) for w in weights):
            raise InvalidArgumentError(
                f"split_hash weights are integer shares, e.g. [95, 5] for 95 % and 5 %; "
                f"got {list(weights)!r}"
            )
        return self._split(
            "hash",
            split_names,
            columns=_args.strings("columns", columns),
            weights=_args.integers("weights", weights),
            discard_weight=_args.integer("discard_weight", discard_weight) or None,
        )

    def split_calculated(self, sql: str, *, split_names: Sequence[str]) -> PermutationBuilder:
        """Assign each row to split ``i``, where ``i`` is the SQL integer expression's value.

        Values outside ``[0, len(split_names))`` and nulls put a row in no split.
        """
        return self._split("calculated", split_names, expr=_args.text("sql", sql))

    def group_by(self, columns: str | Sequence[str]) -> PermutationBuilder:
        """Deal the rows sharing these columns' values as one group (GRPO's
        samples of one prompt, say).

        A group's rows are stored together, in row id order, and dealt whole: in
        one global step, to one rank, in one DataLoader worker. :meth:`shuffle`
        then permutes whole groups, and a step holds the groups that start in
        its ``global_batch_size`` positions of the epoch order, so its size
        varies (docs/concepts.md, "Groups"). Keys may be of any type a hash
        split takes (integers, strings, ...); null is one key like any other.
        Only :meth:`split_hash` on columns of the key may split a grouped
        permutation, and ``clump_size`` and ``window`` do not apply.
        """
        if isinstance(columns, str):
            columns = [columns]
        self._spec["group_by"] = _args.strings("group_by", columns)
        return self

    def shuffle(
        self,
        seed: int,
        clump_size: int | Literal["auto"] | None = None,
        window: int | None = None,
    ) -> PermutationBuilder:
        """Shuffle each split with ``seed``.

        ``clump_size`` keeps runs of that many consecutive rows together;
        ``"auto"`` clumps by the table's pages instead: a clump is the kept
        rows that lie in one page of each row group's widest column, however
        many, so that clumps start and end on page boundaries and with several
        ranks each such page is read by one rank (docs/spec.md, "Page-aligned
        clumps"; the spec records ``clump_size`` -1).
        ``window`` (in clumps) makes an I/O-friendly window shuffle: the split is
        cut into windows of that many clumps in row id order, and the windows and
        the clumps inside each are permuted, so a reader touches each row group
        about once per window.
        """
        shuffle = {
            "seed": _args.integer("seed", seed, 0, _args.UINT64_MAX),
            "clump_size": AUTO_CLUMP
            if clump_size == "auto"
            else _args.optional_integer("clump_size", clump_size),
            "window": _args.optional_integer("window", window),
        }
        self._spec["shuffle"] = {k: v for k, v in shuffle.items() if v is not None}
        return self

    def lengths(self, column: str) -> PermutationBuilder:
        """Record each kept row's length beside its id, from ``column``.

        A list column gives the number of its elements (tokens), an integer
        column its value. Token-budget steps (``StreamingDataset(...,
        tokens_per_step=T)``) plan from these lengths without reading a row.
        A kept row whose length is null or negative fails the build, naming
        the row.
        """
        self._spec["lengths"] = _args.text("lengths", column)
        return self

    def persist(
        self,
        uri: _args.Where,
        progress: ProgressCallback | bool | None = None,
        *,
        build_memory: int | None = None,
        group: Any = None,
    ) -> Permutations:
        """Build the permutation and write it under ``uri``, which must be empty.

        Args:
            uri: where to write, e.g. ``file:///perms/run-7``.
            progress: ``callable(phase, done, total)`` called as rows are scanned
                (phase ``"scan"``), then ordered (``"order"``) and written
                (``"write"``); groups, and splits of tables beyond 2**22 rows
                dealt in a pass, first report the records their passes place
                (``"place"``); ``True`` shows a tqdm bar on stderr (lines when
                tqdm is not installed) with the rows kept, the bytes read and the
                time left; ``None`` shows it when stderr is a terminal; ``False``
                reports nothing.
            build_memory: bytes the build may hold, whatever the table's size
                (default 1 GiB, at least 256 MiB): the kept rows beyond it pass
                through temporary objects under ``uri``. It never changes the
                permutation built (docs/tuning.md).
            group: a ``torch.distributed`` process group (``torch.distributed.group.WORLD``
                for the default one): its processes build the permutation together,
                each scanning a share of the table and writing a share of the
                permutation, which is the one a single process builds, byte for byte.
                Every process of the group calls ``persist`` with the same table
                version, spec and ``uri``; each gets the permutation, or the same
                error naming the rank that failed (one that cannot start the build
                too), and then nothing is committed.
                When a process dies, or hangs past the group's timeout, the others
                raise ``UnavailableError`` at their next exchange, saying they lost
                the group, with the collective's own error. Every spec can be
                built so, ``group_by`` and random and sequential splits too, whose
                splits are each ordered by one process (docs/spec.md, "Distributed
                builds").
        """
        show = progress is True or (progress is None and sys.stderr.isatty())
        display = (_progress.tqdm_bars() or _progress.stderr_lines()) if show else None
        try:
            return self._persist(
                uri,
                _build_report(display[0] if display else None, progress),
                build_memory=build_memory,
                group=group,
            )
        finally:
            if display:
                display[1]()

    def _persist(
        self,
        uri: _args.Where,
        report: Callable[[str, int, int, int, int], None] | None,
        *,
        build_memory: int | None,
        group: Any,
    ) -> Permutations:
        """:meth:`persist` with ``report`` called as the build goes (see
        :func:`_build_report`)."""
        options = {"memory": _args.optional_integer("build_memory", build_memory) or 0}
        at = _args.uri("uri", uri)
        if group is not None:
            handle = _persist_ranks(self._table._handle(), self._spec, at, options, report, group)
        else:
            handle = _lib.permutation_build(self._table._handle(), self._spec, at, options, report)
        return Permutations._from_handle(handle, self._table._cache)


def _persist_ranks(
    table: int,
    spec: dict[str, Any],
    uri: str,
    options: dict[str, Any],
    report: Callable[[str, int, int, int, int], None] | None,
    group: Any,
) -> _native.Handle:
    """Build as one rank of ``group``: step the rank, gathering every rank's
    report of each step on the group, until the permutation is committed.

    Every rank runs the same steps and gathers after each, whether its step
    failed or not (a failure travels in its report), so that no rank waits
    for another that gave up; each rank then raises the same error.
    """
    _torch.require("persist(group=...)")
    import torch.distributed as dist

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if rank < 0:
        raise InvalidArgumentError("persist(group=...): this process is not in the group")
    try:
        build = _lib.BuildRank(table, spec, uri, {**options, "rank": rank, "world": world}, report)
    except CroupierError as exc:
        if world == 1:
            raise
        _refuse_first_step(exc, uri, rank, world, group)
    try:
        gathered: list[str] | None = None
        while True:
            mine, perm = build.next(gathered)
            if mine is None:
                assert perm is not None
                return perm
            reports: list[Any] = [None] * world
            try:
                dist.all_gather_object(reports, mine, group=group)
            except RuntimeError as exc:
                raise UnavailableError(_lost(uri, rank, world, exc)) from exc
            gathered = [str(r) for r in reports]
    finally:
        build.close()


def _refuse_first_step(exc: CroupierError, uri: str, rank: int, world: int, group: Any) -> NoReturn:
    """Report ``exc``, this rank's failure to start the build, as its first
    step's report, so that the others fail with it at their first exchange
    instead of waiting for this rank; then raise it, naming the rank."""
    import torch.distributed as dist

    mine = json.dumps({"rank": rank, "step": 0, "error": str(exc), "code": int(exc.code)})
    reports: list[Any] = [None] * world
    try:
        dist.all_gather_object(reports, mine, group=group)
    except RuntimeError as lost:
        raise UnavailableError(_lost(uri, rank, world, lost)) from exc
    raise type(exc)(f"build permutation {uri}: rank {rank} of {world} failed: {exc}") from exc


def _lost(uri: str, rank: int, world: int, exc: RuntimeError) -> str:
    """The message of a rank whose exchange with the others failed: one of
    them died (gloo: "Connection closed by peer") or did not come within
    the group's timeout ("Timed out waiting")."""
    other = f"rank {1 - rank}" if world == 2 else "another rank"
    return (
        f"build permutation {uri}: rank {rank} of {world} lost the group: {other} "
        f"stopped answering (its process died, or it did not reach the exchange within "
        f"the group's timeout): {type(exc).__name__}: {exc}"
    )


def _build_report(
    display: _progress.PhaseCallback | None, progress: ProgressCallback | bool | None
) -> Callable[[str, int, int, int, int], None] | None:
    """The callback of a build: the display's, with its notes, or the caller's."""
    if display is not None:
        show = display

        def shown(phase: str, done: int, total: int, kept: int, nbytes: int) -> None:
            notes = None
            if phase == "scan":
                notes = {"kept": f"{kept:,}", "read": f"{nbytes / 2**20:,.1f} MiB"}
            show(phase, done, total, notes)

        return shown
    if callable(progress):
        call = progress

        def called(phase: str, done: int, total: int, kept: int, nbytes: int) -> None:
            call(phase, done, total)

        return called
    return None


def _sizes(ratios: Any, counts: Any, fixed: Any) -> dict[str, Any]:
    """The checked sizes of a random or sequential split; Go checks that one is given."""
    return {
        "ratios": None if ratios is None else _args.reals("ratios", ratios, 0.0, 1.0),
        "counts": None if counts is None else _args.integers("counts", counts),
        "fixed": _args.optional_integer("fixed", fixed),
    }


def open_permutations(
    uri: _args.Where,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    cache_bytes: int | None = None,
) -> Permutations:
    """Open a persisted permutation, checking its table version is still there.

    ``cache_dir`` and ``cache_bytes`` set the disk cache its table reads a
    remote store through, as :func:`~croupier.open_table`'s do, by default
    from the environment; copies of the permutation keep them.

    Raises:
        NotFoundError: there is no permutation at ``uri``.
        ChangedError: a file of the table version it was built over changed or
            vanished.
    """
    cache = _cache_options(cache_dir, cache_bytes)
    return Permutations._from_handle(_lib.permutation_open(_args.uri("uri", uri), cache), cache)


class Permutations(_native.Closeable):
    """An opened permutation: its splits, by name or index (``perms["train"]``, ``perms[0]``).

    Picklable: a copy reopens the permutation from its URI on first use.
    """

    _go: _native.Handle | None

    def __init__(self) -> None:
        raise TypeError("use PermutationBuilder.persist() or croupier.open_permutations()")

    @classmethod
    def _from_handle(cls, handle: _native.Handle, cache: dict[str, Any]) -> Permutations:
        """The permutations of a Go handle whose table was opened with the
        disk cache options ``cache``."""
        self = cls.__new__(cls)
        self._setup(handle, _lib.permutation_info(handle.value), cache)
        return self

    def _setup(
        self, handle: _native.Handle | None, info: dict[str, Any], cache: dict[str, Any]
    ) -> None:
        self._go = handle
        self._info = info
        self._cache = cache
        self._closed = False
        self._lock = threading.Lock()
        self._table: Table | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"info": self._info, "cache": self._cache}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._setup(None, state["info"], state["cache"])

    def _handle(self) -> int:
        with self._lock:
            if self._closed:
                raise ClosedError(f"permutation {self.uri} is closed")
            if self._go is None:
                self._go = _lib.permutation_open(self.uri, self._cache)
            return self._go.value

    @property
    def _manifest(self) -> dict[str, Any]:
        return cast("dict[str, Any]", self._info["manifest"])

    @property
    def id(self) -> str:
        """The permutation's UUID (derived from its content)."""
        return str(self._manifest["id"])

    @property
    def uri(self) -> str:
        """Where the permutation is persisted."""
        return str(self._info["uri"])

    @property
    def names(self) -> list[str]:
        """The split names, in order."""
        return [s["name"] for s in self._manifest["splits"]]

    @property
    def provenance(self) -> dict[str, Any]:
        """Table URI and version, the build spec, format version, row counts, build time."""
        m = self._manifest
        return {
            "id": m["id"],
            "table_uri": m["table"]["uri"],
            "table_version": m["table"]["version"],
            "format": m["format"],
            **m["spec"],
            "splits": {s["name"]: s["num_rows"] for s in m["splits"]},
            "rows_scanned": m["rows_scanned"],
            "rows_kept": m["rows_kept"],
            "row_groups": m["row_groups"],
            "row_groups_skipped": m["row_groups_skipped"],
            "built_at": self._info.get("build", {}).get("built_at"),
            "build_seconds": self._info.get("build", {}).get("build_seconds"),
        }

    @property
    def table(self) -> Table:
        """The pinned table version the permutation orders."""
        if self._table is None:
            self._table = Table._from_pin(json.dumps(self._manifest["table"]), self._cache)
        return self._table

    def __len__(self) -> int:
        return len(self._manifest["splits"])

    def __iter__(self) -> Iterator[Permutation]:
        return (Permutation(self, i) for i in range(len(self)))

    def __getitem__(self, key: int | str) -> Permutation:
        if isinstance(key, str):
            if key not in self.names:
                raise KeyError(f"no split {key!r}; the permutation has: {', '.join(self.names)}")
            return Permutation(self, self.names.index(key))
        index = _args.integer("split index", key, -_args.INT64_MAX)
        if not -len(self) <= index < len(self):
            raise IndexError(f"split index {key} out of range for {len(self)} splits")
        return Permutation(self, index % len(self))

    def close(self) -> None:
        """Release the Go handle (idempotent)."""
        with self._lock:
            self._closed = True
            if self._go is not None:
                self._go.close()

    def __repr__(self) -> str:
        splits = ", ".join(f"{s['name']}={s['num_rows']}" for s in self._manifest["splits"])
        return f"<croupier.Permutations {self.uri} id={self.id} [{splits}]>"


class Permutation:
    """One split of a permutation: an ordered sequence of row ids to deal from."""

    def __init__(self, permutations: Permutations, index: int) -> None:
        self.permutations = permutations
        self.index = index

    @property
    def name(self) -> str:
        """The split's name."""
        return self.permutations.names[self.index]

    @property
    def id(self) -> str:
        """Identifies the split in checkpoints: the permutation's UUID and the split name."""
        return f"{self.permutations.id}/{self.name}"

    @property
    def provenance(self) -> dict[str, Any]:
        """The permutation's provenance, with this split's name as ``split_name``."""
        return {**self.permutations.provenance, "split_name": self.name}

    def __len__(self) -> int:
        return int(self.permutations._manifest["splits"][self.index]["num_rows"])

    def row_ids(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Row ids at positions ``[start, stop)`` as a uint64 array (costs O(stop - start))."""
        stop = len(self) if stop is None else _args.integer("stop", stop)
        start = _args.integer("start", start)
        if not 0 <= start <= stop <= len(self):
            raise InvalidArgumentError(
                f"row_ids({start}, {stop}) out of range for split {self.name!r} of {len(self)} rows"
            )
        out = np.empty(stop - start, dtype=np.uint64)
        _lib.permutation_row_ids(
            self.permutations._handle(),
            self.index,
            start,
            stop,
            out.ctypes.data_as(ctypes.POINTER(ctypes.c_uint64)),
        )
        return out

    def __repr__(self) -> str:
        return (
            f"<croupier.Permutation {self.permutations.uri} split={self.name!r} rows={len(self)}>"
        )
