"""``FollowingDataset``: one rank's batches of a croupier table that grows while it trains.

Generators append rollouts to a croupier table while a learner reads it. The
learner cannot pin one version: it deals the table in rounds, each round the
rows of newly committed versions, optionally mixed with a replay sample of
older rows (docs/concepts.md, "Following a growing table"). Which rows a
round holds is a pure function of the committed versions and the options,
computed by the Go core only, so every rank sees the same global steps at any
world size, and a checkpoint resumes exactly, even after more appends.

The position of a dataset is the round holding its next step (the round's
first step, the last version the rounds before it dealt and the rows they left
over) and ``steps_consumed``: global steps delivered to the training loop.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import _args, _lib, _native, _torch
from ._args import Format, ListFormat, Oversize, Packing
from .dataset import (
    _COALESCE_BYTES,
    LayoutHint,
    LoaderHooks,
    _read,
    _StepFormat,
    _WorkerBudget,
    load_without_table_moved,
    merge_stats,
    refuse_batching,
)
from .errors import InternalError, InvalidArgumentError
from .formats import check_format, check_step_size
from .table import Table, open_table

if TYPE_CHECKING:
    from .dataloader import DataLoader

__all__ = ["STATE_FORMAT", "Follow", "FollowStep", "FollowingDataset"]

STATE_FORMAT = 1
# The column following adds to every batch (loader.VersionColumn).
VERSION_COLUMN = "_version"


@dataclasses.dataclass(frozen=True)
class Follow:
    """How a :class:`FollowingDataset` forms its rounds (docs/concepts.md,
    "Following a growing table").

    Args:
        rows_per_round: a round ends at the first committed version at which
            the rows carried into it and the rows of the versions since the
            round before reach this many. None: each round takes one version.
        replay: groups (rows, without ``group_by``) of earlier rounds added to
            each round: an ``int`` is a number of them, a ``float`` a fraction of
            the round's new ones (0.25: one old for four new). Drawn without
            replacement, seeded by the dataset's ``shuffle_seed`` and the round,
            from the versions the staleness rule keeps. None: no replay.
        max_versions_behind: a round ending at version ``v`` keeps only rows of
            versions ``>= v - max_versions_behind``; older rows, new or carried,
            are skipped and counted in :meth:`FollowingDataset.stats`. None: no
            limit.
        max_versions_behind_newest: bounds the lag against what was written. A
            round keeps only rows of versions ``>= N - max_versions_behind_newest``,
            ``N`` being the newest committed version when the round was decided
            (or its last version, when later), and starts no earlier than that
            version: a learner slower than its generators skips ahead. Older rows,
            new or carried, are skipped and counted in
            :meth:`FollowingDataset.stats`. The first process of the run (any rank
            or worker) to need a round's first step decides ``N`` and records it in
            the table's ``_decisions/`` folder, which the learner must be able to
            write; every other rank, and a resumed run, deals the same round.
            None: no such limit.
        run: names the run whose decisions ``max_versions_behind_newest``
            records: runs of the same options and ``run`` share them, and so deal
            the same rounds; give a new run its own name to decide afresh.
        group_by: a column or columns whose equal values, in adjacent rows of
            one version, make a group dealt whole: in one step, on one rank,
            carried and replayed together (GRPO's samples of one prompt, appended
            together). None: every row on its own.
        filter: a SQL boolean expression (docs/sql.md) dropping the rows of
            each version where it is false or null (``"NOT abort AND reward IS
            NOT NULL"``) before anything else: a group keeps its other rows,
            dropped rows are counted in ``stats()["filtered_rows"]``, and only
            the filter's columns of them are read. None: no filter.
        lengths: the column giving each row's length, as
            :meth:`~croupier.PermutationBuilder.lengths` reads it, which
            ``tokens_per_step`` needs.
        start_version: the first version whose rows are dealt.
        wait_timeout: seconds to wait for the versions that complete the next
            round, from the last version that landed; then the iteration ends,
            and ``stats()["waited_out"]`` is True. None: wait without limit.
        poll_interval: seconds between listings of the table's versions while
            waiting.
    """

    rows_per_round: int | None = None
    replay: int | float | None = None
    max_versions_behind: int | None = None
    max_versions_behind_newest: int | None = None
    run: str | None = None
    filter: str | None = None
    lengths: str | None = None
    group_by: str | Sequence[str] | None = None
    start_version: int = 1
    wait_timeout: float | None = 60.0
    poll_interval: float = 0.2

    def options(self) -> dict[str, Any]:
        """The options of the Go core (``"follow"`` of ``croupier_follow_open``).

        Raises:
            InvalidArgumentError: a value out of range, named.
        """
        replay = self.replay
        if isinstance(replay, bool) or not (replay is None or isinstance(replay, (int, float))):
            raise InvalidArgumentError(
                f"replay must be a number of rows (int), a fraction (float) or None, got {replay!r}"
            )
        rows = _args.optional_integer("rows_per_round", self.rows_per_round)
        timeout = self.wait_timeout
        group_by = self.group_by
        if isinstance(group_by, str):
            group_by = [group_by]
        # Set only when given, so that the state dicts of runs without them
        # are unchanged; in the order of Go's FollowOptions, so that a state
        # dict and Go's FollowCheckpoint are the same key for key.
        given: dict[str, Any] = {}
        if self.max_versions_behind_newest is not None:
            given["max_versions_behind_newest"] = _args.integer(
                "max_versions_behind_newest", self.max_versions_behind_newest, 0
            )
        if self.run is not None:
            given["run"] = _args.text("run", self.run)
        if self.filter is not None:
            given["filter"] = _args.text("filter", self.filter)
        if self.lengths is not None:
            given["lengths"] = _args.text("lengths", self.lengths)
        return {
            "rows_per_round": rows or 0,
            "group_by": None if group_by is None else _args.strings("group_by", group_by),
            "replay_count": _args.integer("replay", replay) if isinstance(replay, int) else 0,
            "replay_fraction": _args.number("replay", replay, 0.0, 1e9)
            if isinstance(replay, float)
            else 0.0,
            "max_versions_behind": _args.optional_integer(
                "max_versions_behind", self.max_versions_behind, 0
            ),
            **given,
            "start_version": _args.integer("start_version", self.start_version, 1),
            "wait_timeout_ns": -1
            if timeout is None
            else max(int(_args.number("wait_timeout", timeout, 1e-9, 1e9) * 1e9), 1),
            "poll_interval_ns": max(
                int(_args.number("poll_interval", self.poll_interval, 1e-9, 1e9) * 1e9), 1
            ),
        }


class FollowStep:
    """One global step of a :class:`FollowingDataset` made by a
    :class:`croupier.DataLoader` worker, on its way to the main process: the
    step's number, its round (as :attr:`FollowingDataset.last_round` gives it)
    and its batch in the dataset's format, which the main process hands to the
    training loop, taking the dataset past the step; and the worker's index and
    the counters of its stream when it sent the step
    (:meth:`FollowingDataset.stats`), which the loader adds up over the workers.

    A worker whose stream ends (its wait for versions timed out) sends one more,
    with no step, round or batch: its last counters.
    """

    __slots__ = ("batch", "round", "stats", "step", "worker")

    def __init__(
        self,
        step: int | None,
        round: dict[str, Any] | None,
        batch: Any,
        worker: int,
        stats: dict[str, Any],
    ) -> None:
        self.step, self.round, self.batch = step, round, batch
        self.worker, self.stats = worker, stats


class FollowingDataset(
    _torch.IterableDataset, _native.GoObject, _WorkerBudget, _StepFormat, LoaderHooks
):
    """Deals one rank's share of every global step of following a growing croupier table.

    Each batch is this rank's ``G / world_size`` rows of one global step (with
    ``group_by``, this rank's whole groups of the step, whose size varies; with
    ``tokens_per_step``, this rank's rows, or whole groups, of a step of at most
    that many tokens), with the dataset's columns and ``_version``: the table
    version that added each row (packed with ``packing``). Rounds and steps are
    those of docs/concepts.md ("Following a growing table"); :attr:`last_round`
    describes the round of the last batch.

    Args:
        table: a croupier table (any version; following starts at
            ``follow.start_version``), or its URI or local path.
        follow: how rounds are formed (:class:`Follow`).
        global_batch_size: samples per global step, all ranks together (``G``).
            Give it or ``tokens_per_step``, not both.
        num_splits: streams each round is dealt from (``S``); must divide ``G``,
            and ``world_size`` must divide it. Defaults to ``G``.
        columns: the columns to read (all if None); ``_version`` is added.
        shuffle_seed: seeds each round's shuffle and replay sample.
        rank, world_size: this process's rank; default to torch.distributed's
            when it is initialised, else 0 and 1.
        tokens_per_step: token-budget steps of at most this many tokens, all ranks
            together, of the lengths in ``follow.lengths``: whole groups, the ranks'
            loads within one group (docs/concepts.md, "Following a growing table").
        format, list_format, collate, read_ahead, memory_budget, max_reads,
            oversize, packing, pack_columns, pad_value: as for
            :class:`~croupier.StreamingDataset`.

    Raises:
        InvalidArgumentError: a plain Parquet dataset, a table with a
            ``_version`` column, an unknown column, or numbers that do not fit
            together; the message names them.

    The reading and decoding run on Go threads, so iterating in the training
    process (``num_workers=0``) is often enough. Under
    :class:`croupier.DataLoader` with K workers, worker k follows the table
    itself, from the dataset's position when the iteration began, forming the
    rounds and waiting for their versions, and makes global steps k, k + K, …
    in the dataset's format; the loader hands them to the training loop in step
    order, so :meth:`state_dict` and :attr:`last_round` are exact after every
    step. Workers wait on their own, and may time out at different rounds (one
    just before a version lands, another just after): the iteration then ends
    at the last step delivered in order, and the steps the other workers made
    after it are dealt again by the next iteration, or a resume. Each worker's
    follower holds ``(memory_budget - K * 96 MiB) // K`` (``512 MiB // K`` when
    none is set) unless ``divide_budget=False``. In the
    workers of torch's own DataLoader iteration raises InvalidArgumentError.
    """

    def __init__(
        self,
        table: Table | str | os.PathLike[str],
        follow: Follow,
        global_batch_size: int | None = None,
        *,
        num_splits: int | None = None,
        columns: Sequence[str] | None = None,
        shuffle_seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        format: Format = "torch",
        collate: Callable[[Any], Any] | None = None,
        read_ahead: int | None = None,
        memory_budget: int | None = None,
        list_format: ListFormat = "packed",
        max_reads: int | None = None,
        tokens_per_step: int | None = None,
        oversize: Oversize = "error",
        packing: Packing | None = None,
        pack_columns: Sequence[str] | None = None,
        pad_value: float | Mapping[str, float] = 0,
    ) -> None:
        super().__init__()
        if isinstance(table, (str, os.PathLike)):
            table = open_table(table)
        if not isinstance(table, Table):
            raise TypeError(f"table must be a croupier.Table or a URI, got {type(table).__name__}")
        if not isinstance(follow, Follow):
            raise TypeError(f"follow must be a croupier.Follow, got {type(follow).__name__}")
        check_format(format, list_format)
        default_rank, default_world = _torch.rank_world()

        def optional(name: str, value: int | None, default: int = 0) -> int:
            checked = _args.optional_integer(name, value)
            return default if checked is None else checked

        tokens = check_step_size(global_batch_size, tokens_per_step, oversize, packing)
        self._follow = follow
        self._options: dict[str, Any] = {
            "global_batch_size": 0
            if global_batch_size is None
            else _args.integer("global_batch_size", global_batch_size, 1),
            "num_splits": optional("num_splits", num_splits),
            "tokens_per_step": _args.integer("tokens_per_step", tokens_per_step, 1)
            if tokens
            else 0,
            "oversize": _args.text("oversize", oversize) if tokens else "",
            "rank": default_rank if rank is None else _args.integer("rank", rank),
            "world_size": optional("world_size", world_size, default_world),
            "columns": None if columns is None else _args.strings("columns", columns),
            "shuffle_seed": _args.integer("shuffle_seed", shuffle_seed, 0, _args.UINT64_MAX),
            "drop_last": not tokens,
            "read_ahead": optional("read_ahead", read_ahead),
            "memory_budget": optional("memory_budget", memory_budget),
            "max_reads": optional("max_reads", max_reads),
            "follow": follow.options(),
        }
        self._table = table
        self._format, self._list_format, self._collate = format, list_format, collate
        # Set by croupier.DataLoader on the copies its workers get: they send
        # their steps as FollowStep, and hold their share of the budget.
        self._in_loader = False
        self._divide_budget = False
        self._go: _native.Handle | None = None
        self._closed = False
        self._info: dict[str, Any] = _lib.follow_info(self._handle())
        self._set_packing(
            packing, pack_columns, pad_value, [*self._info["columns"], VERSION_COLUMN]
        )
        self._position: dict[str, Any] = self._info["start"]
        self._next_step = 0
        self._round: dict[str, Any] | None = None
        self._stream: _native.Handle | None = None
        self._stats: dict[str, Any] = {}
        self._layout_hint = LayoutHint()

    # -- lifetime ------------------------------------------------------------------

    def _open_go(self) -> _native.Handle:
        """Open the Go follower, with this worker's share of the budget."""
        return _lib.follow_open(self._table._handle(), self._go_options())

    def close(self) -> None:
        """Release the Go follower and any stream (idempotent). The table stays open."""
        if self._stream is not None:
            self._stream.close()
        super().close()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_go"] = state["_stream"] = None  # handles do not cross processes
        return state

    # -- properties ------------------------------------------------------------------

    @property
    def global_batch_size(self) -> int:
        """Samples per global step, all ranks together."""
        return int(self._info["global_batch_size"])

    @property
    def tokens_per_step(self) -> int | None:
        """Tokens per global step, all ranks together; None for sample-count steps."""
        return int(self._info["tokens_per_step"]) or None

    @property
    def num_splits(self) -> int:
        """Streams each round is dealt from."""
        return int(self._info["num_splits"])

    @property
    def rank(self) -> int:
        """This process's rank."""
        return int(self._info["rank"])

    @property
    def world_size(self) -> int:
        """The number of ranks."""
        return int(self._info["world_size"])

    @property
    def rank_batch_size(self) -> int:
        """Rows of each of this rank's batches: ``G / world_size`` (the mean with
        ``group_by``); 0 for token-budget steps, whose rows vary."""
        return self.global_batch_size // self.world_size

    @property
    def steps_consumed(self) -> int:
        """Global steps delivered to the training loop so far (the next step's number)."""
        return self._next_step

    @property
    def last_round(self) -> dict[str, Any] | None:
        """The round of the last batch delivered, or None before the first.

        Keys: ``round``, ``step`` (its first global step), ``steps``, ``after``
        (the last version of the rounds before), ``version`` (the last version it
        deals), ``newest`` (with ``max_versions_behind_newest``: the newest
        version when it was decided), ``new_rows``, ``replayed_rows``, ``skipped_rows``,
        ``skipped_versions``, ``filtered_rows`` (of its versions, dropped by the
        filter), ``carry`` (rows carried into it) and ``next`` (the position of the
        round after it).
        """
        return self._round

    def rows_of_step(self, step: int, epoch: int | None = None) -> np.ndarray:
        """The row ids of global step ``step``, every rank's, rank 0's first: the
        samples that step trains on, as :meth:`croupier.StreamingDataset.rows_of_step`
        gives a dataset's.

        The same whatever this dataset's rank, world size and workers; with
        :meth:`croupier.Table.take` on the table (its latest version: appends
        keep row ids) it gives the rows themselves. The rounds are formed, as
        the run formed them, of the versions committed now: from this
        dataset's position when ``step`` is not before it, else from the first
        round. Following has one sequence of steps and no epochs: ``epoch`` is
        None or 0. ``croupier deal --checkpoint FOLLOW.json --steps A:B`` gives
        the same rows, with the version that added each.

        Raises:
            InvalidArgumentError: ``step`` is negative, or ``epoch`` is not 0.
            NotFoundError: ``step`` is in a round whose versions are not
                committed yet.
        """
        if epoch is not None:
            _args.integer("epoch", epoch, 0, 0)
        step = _args.integer("step", step)
        (dealt,) = _lib.follow_steps(self._handle(), self._position, step, step + 1)
        return np.array([row for rank in dealt["ranks"] for row in rank], dtype=np.uint64)

    # -- as a source of a croupier.Mixture (the Go core's loader.Source) ----------------

    def _source_position(self, start: bool) -> dict[str, Any]:
        """This dataset's cursor in a mixture's position: the global step and the
        position of the round holding it, at its start or where it stands."""
        if start:
            return {"epoch": 0, "steps_consumed": 0, "round": self._info["start"]}
        return {"epoch": 0, "steps_consumed": self._next_step, "round": dict(self._position)}

    def _slot_rows(self, slot: Mapping[str, Any]) -> np.ndarray:
        """The rows of the global step that fills a mixture slot ``{"step"}``."""
        return self.rows_of_step(slot["step"])

    # -- iteration -------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        refuse_batching(sys._getframe(1), "FollowingDataset")
        worker = _torch.worker_info()
        if worker is not None and not self._in_loader:
            raise InvalidArgumentError(
                "a FollowingDataset in DataLoader worker processes needs croupier.DataLoader, "
                "which hands its steps over in order and keeps the dataset's position; with "
                "torch's DataLoader use num_workers=0"
            )
        k, num_workers = (worker.id, worker.num_workers) if worker is not None else (0, 1)
        if self._stream is not None:
            self._stream.close()
        stream = _lib.follow_stream_open(
            self._handle(),
            {
                "position": self._position,
                "step": self._next_step,
                "worker": k,
                "num_workers": num_workers,
                "coalesce_bytes": 0 if self.tokens_per_step else _COALESCE_BYTES,
            },
        )
        self._stream = stream
        rows = self.rank_batch_size
        try:
            for first, steps, batch in self._batches(stream):
                if self._round is None or not (
                    self._round["step"] <= first < self._round["step"] + self._round["steps"]
                ):
                    self._round = _lib.follow_round(stream.value)
                # A batch of several steps of the worker (every K-th global
                # step, in one round) has rows rows in each; a grouped step,
                # whose size varies, comes alone.
                sizes = [rows] * steps if steps > 1 else [batch.num_rows]
                outs = self._convert(batch, sizes)
                del batch
                stats = _lib.stream_stats(stream.value) if worker is not None else {}
                for i, out in enumerate(outs):
                    step = first + i * num_workers
                    if self._collate is not None:
                        out = self._collate(out)
                    if worker is not None:
                        yield FollowStep(step, self._round, out, k, stats)
                        continue
                    self._deliver(step, self._round)
                    yield out
            if worker is not None:
                yield FollowStep(None, None, None, k, _lib.stream_stats(stream.value))
        finally:
            if not stream.closed:
                self._stats = _lib.stream_stats(stream.value)
            stream.close()
            self._stream = None

    def _batches(self, stream: _native.Handle) -> Iterator[tuple[int, int, Any]]:
        """The stream's batches; in a worker whose budget was divided, errors say so."""
        with self._budget_errors():
            yield from _read(stream, self._layout_hint)

    def _deliver(self, step: int, in_round: dict[str, Any]) -> None:
        """Global step ``step`` of round ``in_round`` reached the training loop:
        the dataset moves past it (called by croupier.DataLoader with workers)."""
        self._round = in_round
        self._next_step = step + 1
        end = in_round["step"] + in_round["steps"]
        self._position = in_round["next"] if step + 1 == end else self._round_position()

    def _round_position(self) -> dict[str, Any]:
        """The position of the round of the last batch."""
        assert self._round is not None
        keys = ("round", "step", "after", "head", "carry", "newest")
        return {key: self._round[key] for key in keys if key in self._round}

    def stats(self) -> dict[str, Any]:
        """Counters of the iteration running now, or of the last one.

        The keys of :meth:`croupier.StreamingDataset.stats`, summed over the
        rounds for ``steps``, ``rows`` and ``stall_ns``, and: ``rounds`` formed,
        ``version`` (the last version of the last round), ``new_rows``,
        ``replayed_rows``, ``skipped_rows`` and ``skipped_versions`` (dropped by
        the staleness rule), ``filtered_rows`` (dropped by the filter), ``waits``
        (listings that found no new version) and
        ``waited_out`` (the iteration ended because ``wait_timeout`` passed).
        Empty before the first iteration.

        Under :class:`croupier.DataLoader` with workers, the counters the
        workers sent with their steps delivered, and at their ends, added up:
        the sum over the workers for the stream's counters and ``waits``, the
        most of any worker for the peak and the rounds' counts (each worker forms
        every round), ``waited_out`` if any worker's wait timed out. A worker's
        counters may include steps it read but had not sent yet.
        """
        if self._stream is not None and not self._stream.closed:
            return _lib.stream_stats(self._stream.value)
        return dict(self._stats)

    # -- checkpoints -----------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """A small JSON-serialisable dict: the position and what the rounds depend on.

        ``position`` is the round holding the next step (docs/concepts.md,
        "Following a growing table"), ``steps_consumed`` the global steps
        delivered. It is the same on every rank.
        """
        return _lib.source_checkpoint(self._handle(), self._source_position(start=False))

    # -- what croupier.DataLoader asks of the datasets it reads (dataloader.LoaderHooks)

    def _loader_collates(self) -> list[Callable[[Any], Any] | None]:
        return [self._collate]

    def _tell_workers(self, loader: DataLoader, starting: bool) -> None:
        self._in_loader, self._divide_budget = starting, starting and loader.divide_budget

    def _from_workers(self, loader: DataLoader, items: Iterator[Any]) -> Iterator[Any]:
        """The steps the workers send (FollowStep), each taking the dataset past
        it as it is handed over, up to the first that is not the next step.

        torch takes one item from each worker in turn, and worker k of K sends
        steps k, k + K, ...: they arrive in step order until a worker's wait for
        versions times out before its next step while the others go on (they
        wait on their own, and a version may land between their timeouts). The
        iteration then ends at the last step delivered in order; the steps the
        workers made after it are dropped, and dealt again by the next
        iteration, which starts from the dataset's position.
        """
        workers: dict[int, dict[str, Any]] = {}  # each worker's counters, as last taken
        for item in items:
            if not isinstance(item, FollowStep):
                raise InternalError(
                    f"croupier.DataLoader: a FollowingDataset's worker sent a "
                    f"{type(item).__name__} when step {self.steps_consumed} was next"
                )
            if item.step is not None and item.step != self.steps_consumed:
                return  # not counted: the next iteration deals it again
            workers[item.worker] = item.stats
            self._stats = merge_stats(workers.values())
            if item.step is None:
                continue  # the worker's wait timed out: its last counters
            assert item.round is not None
            out = loader.collate_fn(item.batch)
            self._deliver(item.step, item.round)
            yield out

    def _loader_length(self) -> int:
        raise TypeError(
            "a croupier.FollowingDataset has no length: its iterations end when no "
            "version completes the next round within wait_timeout"
        )

    def _loader_load(self, state_dict: Mapping[str, Any], table_moved: bool) -> None:
        load_without_table_moved(self, state_dict, table_moved)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from a checkpoint of any world size: the next iteration deals
        exactly the steps the uninterrupted run would have, after the checkpoint.

        Raises:
            InvalidArgumentError: the dict is of another format or kind, or
                describes another table, ``global_batch_size``, ``num_splits``,
                ``shuffle_seed`` or rule of rounds (named with both values).
        """
        position = _lib.source_restore(self._handle(), state_dict, {})
        self._position, self._next_step, self._round = (
            position["round"],
            position["steps_consumed"],
            None,
        )

    def __repr__(self) -> str:
        return (
            f"<croupier.FollowingDataset {self._table.uri} G={self.global_batch_size} "
            f"S={self.num_splits} rank={self.rank}/{self.world_size} "
            f"steps_consumed={self._next_step}>"
        )
