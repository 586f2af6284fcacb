"""``StreamingDataset``: one rank's batches of a deterministic, resumable epoch.

The dealing order (docs/concepts.md) is computed by the Go core only; this module asks it
for "the batches of rank r, worker k, from step t" and converts them for torch.

Position and checkpoints: the dataset keeps a cursor ``(epoch, steps_consumed)``
of global steps delivered to the training loop. Iterating starts at the cursor;
a completed epoch moves it to ``(epoch + 1, 0)``. Who advances it:

- ``num_workers=0`` (any loader): the dataset, as it yields each batch;
- :class:`croupier.DataLoader` with workers: the loader, in the main process,
  as it hands each batch to the training loop (its workers share runs of
  consecutive steps, see :mod:`croupier._runs`);
- ``torchdata``'s ``StatefulDataLoader`` with workers: each worker's copy, whose
  ``state_dict()`` the loader collects (call ``loader.state_dict()`` then). A
  checkpoint taken after the last batch of an epoch continues with the next
  epoch. Once an iteration has ended, torchdata starts the next one from the
  main process's copy, which never saw the workers advance: set the epoch with
  :meth:`StreamingDataset.set_epoch` at the top of each epoch, as with any torch
  DataLoader.
"""

from __future__ import annotations

import abc
import contextlib
import os
import sys
import types
import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from . import _args, _lib, _native, _torch
from ._args import Format, ListFormat, Oversize, Packing
from ._runs import PLACES, RUN_STEPS, Outbox, Steps, merge_runs
from .errors import BudgetWarning, InternalError, InvalidArgumentError, LayoutWarning
from .formats import (
    arrow_ints,
    check_format,
    check_packing,
    check_step_size,
    convert_or_pack_steps,
    numpy_view,
)
from .permutation import Permutation
from .table import Table

if TYPE_CHECKING:
    from .dataloader import DataLoader
    from .follow import FollowingDataset
    from .mixture import Mixture

__all__ = ["STATE_FORMAT", "StreamingDataset"]

STATE_FORMAT = 2
# Steps smaller than this many bytes come from the Go core several at a time:
# each crossing and conversion costs tens of microseconds, however small the
# step (see croupier.formats.convert_steps).
_COALESCE_BYTES = 1 << 20


def refuse_batching(caller: types.FrameType | None, dataset: str) -> None:
    """Refuse to be batched again by torch's DataLoader: raise when ``caller``,
    the frame that asked a dataset's iterator for its first batch, is the
    fetch of a :class:`torch.utils.data.DataLoader` with a ``batch_size``
    (1 by default), which would gather that many batches into one and stack
    their tensors."""
    fetch = sys.modules.get("torch.utils.data._utils.fetch")
    # Only the fetch's own frame is looked into: reading a frame's f_locals
    # keeps a snapshot of its locals on the frame, and a training loop's
    # frame would then hold the batch it was given after it let go of it.
    if (
        fetch is None
        or caller is None
        or caller.f_code is not fetch._IterableDatasetFetcher.fetch.__code__
    ):
        return
    fetcher = caller.f_locals.get("self")
    if not isinstance(fetcher, fetch._IterableDatasetFetcher) or not fetcher.auto_collation:
        return
    raise InvalidArgumentError(
        f"a croupier.{dataset} yields whole batches (its steps), which "
        "torch.utils.data.DataLoader's batch_size (1 by default) would batch again: use "
        "croupier.DataLoader(dataset), or torch.utils.data.DataLoader(dataset, batch_size=None)"
    )


def _in_main_process() -> bool:
    return _torch.worker_info() is None


def _read(stream: _native.Handle, hint: LayoutHint) -> Iterator[tuple[int, int, pa.RecordBatch]]:
    """A Go stream's batches: ``(first step, steps, record batch)``; ``hint``
    looks at the stream's layout hint as they come."""
    schema = None
    n = 0
    while (item := _lib.stream_next(stream.value, schema)) is not None:
        schema = item[2].schema
        yield item
        del item  # not held while the next one is read
        n += 1
        hint.check(stream, n)


_PACKAGE = os.path.dirname(__file__) + os.sep


class LayoutHint:
    """Warns once, with :class:`LayoutWarning`, when a dataset's stream says its
    table's layout makes the read decode many times what it delivers (the Go
    stream's ``layout_hint``). It asks every ``every`` batches until it has
    warned, and not again."""

    every = 16

    def __init__(self) -> None:
        self.warned = False

    def check(self, stream: _native.Handle, batches: int) -> None:
        """Ask ``stream``, after its ``batches``-th batch, and warn if it hints."""
        if self.warned or batches % self.every:
            return
        if text := _lib.stream_hint(stream.value):
            self.warned = True
            # Point at the first frame outside croupier: the loop that reads.
            level = 1
            frame: FrameType | None = sys._getframe(0)
            while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
                level, frame = level + 1, frame.f_back
            warnings.warn(text, LayoutWarning, stacklevel=level)


# Counters of a stream (StreamingDataset.stats, FollowingDataset.stats) that
# are the most of any worker when combined: a size each worker has on its
# own; and a follow stream's counts of the rounds it formed and whether its
# wait timed out: every worker forms the same rounds, each as far as it got.
# Every other counter is a sum, the peaks too: the workers' streams hold
# their rows side by side, each under its share of the budget, so the
# process tree's rows kept at once are at most the sum of the workers'
# peaks, against the sum of their shares (held_limit).
_MOST_STATS = frozenset(
    {
        "horizon_steps",
        "step_bytes",
        "rounds",
        "version",
        "new_rows",
        "replayed_rows",
        "skipped_rows",
        "skipped_versions",
        "waited_out",
    }
)


class LoaderHooks(abc.ABC):
    """What croupier.DataLoader asks of a dataset it reads, each dataset
    answering for itself (StreamingDataset, Mixture, FollowingDataset), so
    that the loader never asks a dataset what class it is."""

    _loader_counts = False  # set by croupier.DataLoader: it counts the delivered steps

    @abc.abstractmethod
    def _loader_collates(self) -> list[Callable[[Any], Any] | None]:
        """The collate functions of the datasets whose batches it yields: any
        that is not None runs the user's code, which needs worker processes."""

    @abc.abstractmethod
    def _tell_workers(self, loader: DataLoader, starting: bool) -> None:
        """Set what the copies of the dataset that the loader's workers get must
        know while they start (``starting``), or take it back here."""

    @abc.abstractmethod
    def _from_workers(self, loader: DataLoader, items: Iterator[Any]) -> Iterator[Any]:
        """The batches the loader hands over, from what its workers send,
        taking the dataset's position past each as it is handed over."""

    @abc.abstractmethod
    def _loader_length(self) -> int:
        """The loader's ``len``: the batches its next iteration yields."""

    @abc.abstractmethod
    def _loader_load(self, state_dict: Mapping[str, Any], table_moved: bool) -> None:
        """The loader's ``load_state_dict``."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """The dataset's checkpoint."""


def load_without_table_moved(
    dataset: Mixture | FollowingDataset, state_dict: Mapping[str, Any], table_moved: bool
) -> None:
    """Load ``state_dict`` into a dataset whose state dict names no table to
    move (croupier.DataLoader.load_state_dict's ``table_moved``)."""
    if table_moved:
        raise InvalidArgumentError(f"a {type(dataset).__name__}'s state dict takes no table_moved")
    dataset.load_state_dict(state_dict)


def merge_stats(streams: Iterable[Mapping[str, int]], shared: bool = False) -> dict[str, int]:
    """The counters of several workers' streams as one: the most of each worker
    for a size and the counts of rounds formed (``_MOST_STATS``), and
    for the steps of workers that share steps (each deals every step, see
    croupier._runs), the sum for every other key."""
    most = _MOST_STATS | {"steps"} if shared else _MOST_STATS
    out: dict[str, int] = {}
    for stats in streams:
        for key, value in stats.items():
            if key not in out:
                out[key] = value
            elif key in most:
                out[key] = max(out[key], value)
            else:
                out[key] += value
    return out


# What each DataLoader worker process holds beyond its share of a divided
# budget, set aside before the budget is divided (docs/tuning.md, "memory_budget
# is a bound"): its own copy of the library's image (about 40 MiB resident
# while it reads) and of the Go runtime, whose heap holds loader.GoHeapBase
# beside the streams' share, the pages of torch's, pyarrow's and numpy's code
# and the interpreter's objects it touches, copied from the fork server, and
# the training process's own copy of the library beyond the bound's 64 MiB.
# Measured: 2 workers reading wide rows with 32 MiB each grew by 99 to 122 MiB
# each over what they held when started, 67 to 90 beyond their shares.
WORKER_ALLOWANCE = 96 << 20


class _WorkerBudget:
    """The share of a dataset's memory budget its copy in a DataLoader worker
    holds: croupier.DataLoader sets ``_divide_budget`` on the copies its K
    workers get, and each opens its Go object with ``(memory_budget - K *
    WORKER_ALLOWANCE) // K``, or, where the workers send runs of steps
    (``_send_runs``), three quarters of that: the other quarter bounds the runs
    waiting in its slots (croupier._runs.Outbox)."""

    _divide_budget: bool
    _info: dict[str, Any]  # the Go object's info: memory_budget has Go's default filled in
    _options: dict[str, Any]  # what the Go object is opened with

    def _worker_share(self) -> int | None:
        """This worker's share of the dataset's budget when croupier.DataLoader
        divides it among its workers and this is one of them, else None.

        Raises:
            InvalidArgumentError: the budget leaves nothing once each worker's
                allowance is set aside.
        """
        worker = _torch.worker_info()
        if not self._divide_budget or worker is None:
            return None
        budget, k = int(self._info["memory_budget"]), int(worker.num_workers)
        if not self._options.get("memory_budget"):
            # Go's default budget is the rows': the allowances come on top of
            # it, so that no number of workers makes the default refuse.
            return budget // k
        share = (budget - k * WORKER_ALLOWANCE) // k
        if share <= 0:
            raise InvalidArgumentError(
                f"memory_budget {budget} bytes is too small for {k} DataLoader workers: "
                f"croupier.DataLoader sets aside {WORKER_ALLOWANCE} bytes for each worker "
                "process's own memory (its copy of the library and the Go runtime, the "
                "interpreter) and divides the rest among them, so that the process tree "
                "stays within the budget's bound (docs/tuning.md); raise memory_budget above "
                f"{k * WORKER_ALLOWANCE}, start fewer workers, read in the training process "
                "(num_workers=0), or pass divide_budget=False to give each worker all of it"
            )
        return share

    def _worker_budget(self) -> int | None:
        """The memory budget of this copy's Go object when croupier.DataLoader
        divides the dataset's among its workers and this is one of them, else None."""
        if (share := self._worker_share()) is None:
            return None
        if getattr(self, "_send_runs", False):
            share -= share // 4
        # At least one byte: 0 would mean the default to Go.
        return max(int(share), 1)

    def _outbox_bytes(self) -> int:
        """The bytes of the runs this copy's slots may hold while they wait for
        the trainer: in a worker whose budget croupier.DataLoader divides, the
        quarter of its share that its Go object leaves; else 0, no bound."""
        return (self._worker_share() or 0) // 4

    def _go_options(self) -> dict[str, Any]:
        """The options to open the Go object with: in a worker, its share of the budget."""
        if (budget := self._worker_budget()) is None:
            return self._options
        return {**self._options, "memory_budget": budget}

    @contextlib.contextmanager
    def _budget_errors(self) -> Iterator[None]:
        """Errors of the Go object inside say, in a worker whose budget was
        divided, how it was divided (see :meth:`_budget_error`)."""
        try:
            yield
        except InvalidArgumentError as exc:
            if (error := self._budget_error(exc)) is None:
                raise
            raise error from exc

    def _budget_error(self, exc: InvalidArgumentError) -> InvalidArgumentError | None:
        """``exc`` saying how the budget was divided, in a worker whose budget
        croupier.DataLoader divided (too small a budget may be too small for the
        worker's share only); None elsewhere."""
        worker = _torch.worker_info()
        if worker is None or (budget := self._worker_budget()) is None:
            return None
        return InvalidArgumentError(
            f"{exc} (in DataLoader worker {worker.id} of {worker.num_workers}: "
            f"croupier.DataLoader divides the dataset's memory_budget "
            f"{self._info['memory_budget']} among its workers, less {WORKER_ALLOWANCE} bytes "
            f"set aside for each, {budget} bytes each; "
            "raise memory_budget, or pass divide_budget=False to give each worker all of it)"
        )


class _StepFormat:
    """The form a dataset hands its steps out in, packing included: set up and
    applied the same way by StreamingDataset and FollowingDataset."""

    _format: str
    _list_format: str
    _info: dict[str, Any]
    _options: dict[str, Any]

    def _set_packing(
        self,
        packing: str | None,
        pack_columns: Sequence[str] | None,
        pad_value: float | Mapping[str, float],
        columns: list[str],
    ) -> None:
        """Check and keep ``packing`` of ``pack_columns`` (of the batches'
        ``columns``) and its ``pad_value``."""
        self._pack_columns = (
            None if pack_columns is None else _args.strings("pack_columns", pack_columns)
        )
        check_packing(packing, self._pack_columns, self._format, columns)
        self._packing = packing
        self._pad_value = dict(pad_value) if isinstance(pad_value, Mapping) else pad_value

    def _convert(self, batch: pa.RecordBatch, sizes: list[int]) -> Iterator[Any]:
        """The consecutive steps of ``batch``, of ``sizes`` rows, in the dataset's format."""
        tokens = int(self._info["tokens_per_step"]) or None
        truncate = tokens if self._options["oversize"] == "truncate" else None
        return convert_or_pack_steps(
            batch,
            sizes,
            self._format,
            self._list_format,
            self._packing,
            self._pack_columns,
            self._pad_value,
            truncate,
        )


class StreamingDataset(
    _torch.IterableDataset, _native.GoObject, _WorkerBudget, _StepFormat, LoaderHooks
):
    """Deals one rank's share of every global step of an epoch (docs/concepts.md).

    Args:
        source: the rows to deal: a :class:`~croupier.Permutation` (one split of a
            persisted permutation), or a :class:`~croupier.Table` (dealt in its stored
            order, the identity permutation).
        global_batch_size: samples per global step, all ranks together (``G``).
            Give it or ``tokens_per_step``, not both.
        num_splits: number of streams an epoch is dealt from (``S``); must divide
            ``G``, and ``world_size`` must divide it. Defaults to ``G``.
        columns: the columns to read (all if None).
        shuffle_seed: seed of the per-epoch order (recorded in checkpoints).
        epoch: the epoch to start in.
        rank, world_size: this process's rank; default to torch.distributed's
            when it is initialised, else 0 and 1.
        drop_last: drop the final partial step of an epoch (default True). Token-budget
            steps deal every row: it does not apply to them.
        format: ``"torch"``, ``"numpy"``, ``"arrow"`` or ``"python"``
            (see :mod:`croupier.formats`).
        collate: optional callable applied to each converted batch.
        read_ahead: batches the Go core reads ahead (None: its default); a batch
            is one step, or several consecutive ones when they are small.
        memory_budget: bytes the Go core's stream may hold: data fetched and being
            decoded, batches read ahead and the rows kept for the steps ahead
            (None: its default, 512 MiB). Too small a budget for one step
            raises InvalidArgumentError naming the sizes. :class:`croupier.DataLoader`
            gives each of its K worker processes ``(memory_budget - K * 96 MiB)
            // K`` (refused when that leaves nothing) unless ``divide_budget=False``.
        max_reads: range requests to the store kept in flight (None: its default,
            16 on local files, 64 on a remote store); raise it for stores with
            high latency.
        list_format: ``"packed"`` (values + ``_offsets``) or ``"padded"``
            (``[rows, max_len]`` + ``_lengths``) for list columns in torch format.
        tokens_per_step: token-budget steps (docs/concepts.md, "Token-budget steps")
            instead of ``global_batch_size``: global step t holds the next rows of
            the epoch order while their lengths sum to at most T, divided among the
            ranks by tokens. ``source`` must be a permutation built with lengths
            (:meth:`~croupier.PermutationBuilder.lengths`).
        oversize: what a token budget does with a row longer than it: ``"error"``
            (raise InvalidArgumentError naming the row, when the dataset is made or
            its epoch planned) or ``"truncate"`` (the row is a step of its own, cut to
            ``tokens_per_step`` values in every ``pack_columns``; needs ``packing``).
        packing: ``"packed"`` or ``"padded"``: the aligned list columns
            ``pack_columns`` of each step become one flat sequence each, with
            ``cu_seqlens`` and ``position_ids``, or ``[rows, longest]`` arrays
            padded with ``pad_value``, with ``attention_mask`` and ``position_ids``
            (see :func:`croupier.formats.pack`). None: no packing.
        pack_columns: the list columns to pack (tokens, logprobs, masks, ...);
            every row holds as many values in each.
        pad_value: what ``"padded"`` fills with: a number, or one per column.

    Raises:
        InvalidArgumentError: unknown column or format, or numbers that do not fit
            together (``G % S``, ``S % world_size``, ``S`` > rows, rank out of range);
            the message has the numbers.

    Each batch is this rank's share of one global step: ``G / world_size`` samples;
    from a grouped permutation, this rank's whole groups of the step, whose size
    varies (docs/concepts.md, "Groups"); or with ``tokens_per_step`` the rows the
    step's token budget gives this rank. The
    dataset pickles cheaply (for ``spawn``/``forkserver`` workers): Go handles are
    reopened in the worker, on exactly the pinned table version.
    """

    def __init__(
        self,
        source: Table | Permutation,
        global_batch_size: int | None = None,
        *,
        num_splits: int | None = None,
        columns: Sequence[str] | None = None,
        shuffle_seed: int = 0,
        epoch: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool | None = None,
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
        if not isinstance(source, (Table, Permutation)):
            raise TypeError(
                f"source must be a croupier.Permutation or Table, got {type(source).__name__} "
                "(open one with croupier.open_table)"
            )
        check_format(format, list_format)
        default_rank, default_world = _torch.rank_world()

        def optional(name: str, value: int | None, default: int = 0) -> int:
            # 0 asks the Go core for its default
            checked = _args.optional_integer(name, value)
            return default if checked is None else checked

        tokens = check_step_size(global_batch_size, tokens_per_step, oversize, packing)
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
            "drop_last": (not tokens) if drop_last is None else bool(drop_last),
            "read_ahead": optional("read_ahead", read_ahead),
            "memory_budget": optional("memory_budget", memory_budget),
            "max_reads": optional("max_reads", max_reads),
        }
        self._source = source
        self._format = format
        self._list_format = list_format
        self._collate = collate
        if isinstance(source, Table):
            source._pin_json()  # cached now, so that copies in workers reopen this very version
        # Set by croupier.DataLoader on the copies its workers get: each of K
        # workers opens its Go dataset with the budget divided by K.
        self._divide_budget = False
        self._go: _native.Handle | None = self._open_go()
        self._closed = False
        self._info: dict[str, Any] = _lib.dataset_info(self._go.value)
        # Global steps of each epoch planned so far (token-budget steps vary by epoch).
        self._epoch_steps: dict[int, int] = {0: int(self._info["steps_per_epoch"])}
        self._set_packing(packing, pack_columns, pad_value, self.columns)
        self._epoch = 0
        self._next_step = 0
        self._set_position(_args.integer("epoch", epoch), 0)
        # True in a worker's copy whose position was left by its own iteration
        # (worker k after step t holds t - k + K): see __iter__.
        self._worker_position = False
        self._shipped = False  # pickled to worker processes by the main process
        self._loader_counts = False  # a croupier.DataLoader counts delivered steps
        # Set by croupier.DataLoader on the copies its workers get: they share
        # runs of steps and send them in Arrow, and the loader merges and
        # converts them in the main process (see croupier._runs).
        self._send_runs = False
        # The stream __iter__ reads now, weakly: the dataset must not keep a
        # stream alive that an interrupted iteration left behind.
        self._stream: weakref.ref[_native.Handle] | None = None
        self._stats: dict[str, int] = {}  # of the last stream, once it ended
        self._layout_hint = LayoutHint()

    # -- lifetime ------------------------------------------------------------------

    def _open_go(self) -> _native.Handle:
        """Open the Go dataset over the source, with this worker's share of the budget."""
        options = self._go_options()
        if isinstance(self._source, Permutation):
            perms = self._source.permutations
            return _lib.dataset_open_split(perms._handle(), self._source.index, options)
        return _lib.dataset_open(self._source._handle(), options)

    def __getstate__(self) -> dict[str, Any]:
        if _in_main_process():
            self._shipped = True
        state = self.__dict__.copy()
        state["_go"] = None  # handles do not cross processes; the table pickles its pin
        state["_stream"] = None
        return state

    # -- shape of the epoch ----------------------------------------------------------

    @property
    def steps_per_epoch(self) -> int:
        """Global steps in :attr:`epoch` (including a final partial one if not drop_last).

        The same in every epoch for sample-count steps; token-budget steps cut
        each epoch's order by its own lengths, so their number varies by epoch.
        """
        return self._steps(self._epoch)

    def _steps(self, epoch: int) -> int:
        """Global steps in ``epoch``."""
        if not self.tokens_per_step:
            return self._epoch_steps[0]
        if epoch not in self._epoch_steps:
            self._epoch_steps[epoch] = _lib.dataset_epoch_steps(self._handle(), epoch)
        return self._epoch_steps[epoch]

    @property
    def tokens_per_step(self) -> int | None:
        """The token budget of each global step, or None for sample-count steps."""
        return int(self._info["tokens_per_step"]) or None

    @property
    def rank(self) -> int:
        return int(self._info["rank"])

    @property
    def world_size(self) -> int:
        return int(self._info["world_size"])

    @property
    def num_splits(self) -> int:
        return int(self._info["num_splits"])

    @property
    def global_batch_size(self) -> int:
        return int(self._info["global_batch_size"])

    @property
    def rank_batch_size(self) -> int:
        """Samples in each batch this rank yields (``global_batch_size / world_size``);
        0 for token-budget steps, whose rows vary."""
        return int(self._info["rank_batch_size"])

    @property
    def columns(self) -> list[str]:
        """The columns each batch holds."""
        return list(self._info["columns"])

    @property
    def epoch(self) -> int:
        """The epoch the next iteration deals from."""
        return self._epoch

    @property
    def steps_consumed(self) -> int:
        """Global steps of :attr:`epoch` already delivered; the next iteration starts here."""
        return self._next_step

    def set_epoch(self, epoch: int) -> None:
        """Deal ``epoch`` next, from its first step.

        Setting the epoch the dataset is already in keeps its position, so a
        ``set_epoch(e)`` at the top of the epoch loop does not undo a resume.
        """
        epoch = _args.integer("epoch", epoch)
        if epoch != self._epoch:
            self._set_position(epoch, 0)

    def __len__(self) -> int:
        """Batches the next iteration yields: the steps left in :attr:`epoch`,
        ``steps_per_epoch - steps_consumed`` (all of them unless it was resumed
        inside the epoch or stopped early)."""
        return self.steps_per_epoch - self._next_step

    # -- iteration -------------------------------------------------------------------

    def _set_position(self, epoch: int, step: int) -> None:
        if epoch < 0 or step < 0:
            raise InvalidArgumentError(
                f"epoch and steps_consumed must be >= 0, got epoch={epoch}, steps_consumed={step}"
            )
        # A worker's copy keeps an unnormalised position (see __iter__).
        if _in_main_process() and step >= self._steps(epoch):
            epoch, step = epoch + 1, 0
        self._epoch, self._next_step = epoch, step

    def _count_delivered(self) -> None:
        """One more step reached the training loop (called by croupier.DataLoader)."""
        self._set_position(self._epoch, self._next_step + 1)

    def __iter__(self) -> Iterator[Any]:
        refuse_batching(sys._getframe(1), "StreamingDataset")
        worker = _torch.worker_info()
        k, num_workers = (worker.id, worker.num_workers) if worker is not None else (0, 0)
        stride = max(num_workers, 1)
        epoch, start = self._epoch, self._next_step
        if self._worker_position and start + k >= self._steps(epoch):
            # This worker's position comes from its own iteration (a
            # StatefulDataLoader checkpoint) and its next step is past the end
            # of the epoch: it continues into the next epoch, at the step the
            # in-order round robin reaches it (start + k - steps_per_epoch).
            epoch, start = epoch + 1, start - self._steps(epoch)
        runs = self._send_runs and worker is not None
        stream = self._open_stream(
            {
                "epoch": epoch,
                "start_step": start,
                "worker": k,
                "num_workers": num_workers,
                "share_steps": runs,
                # Token-budget steps vary in rows: one a batch, so that
                # each batch is one step.
                "coalesce_bytes": 0 if self.tokens_per_step else _COALESCE_BYTES,
            }
        )
        try:
            self._stream = weakref.ref(stream)
            if runs:
                yield from self._runs(stream, start, k)
            else:
                for first, steps, batch in self._batches(stream):
                    outs = self._convert(batch, self._step_sizes(steps, batch.num_rows))
                    del batch  # the conversions hold what they need
                    for i, out in enumerate(outs):
                        if self._collate is not None:
                            out = self._collate(out)
                        # Worker k of K yields start+k, start+k+K, ...: after step t, an
                        # iteration from t - k + K continues exactly where this one stopped.
                        self._set_position(epoch, first + i * stride - k + stride)
                        self._worker_position = worker is not None
                        yield out
                        # Not held while the next batch is read: a step of a
                        # row far larger than the rest is as large as it.
                        del out
        finally:
            try:
                if not stream.closed:  # a collected generator's handle may be gone
                    self._stats = _lib.stream_stats(stream.value)
            finally:
                stream.close()

    def _open_stream(self, options: dict[str, Any]) -> _native.Handle:
        """Open a Go stream; in a worker whose budget was divided, errors say so."""
        with self._budget_errors():
            return _lib.stream_open(self._handle(), options)

    def _batches(self, stream: _native.Handle) -> Iterator[tuple[int, int, pa.RecordBatch]]:
        """The stream's batches (``_read``); in a worker whose budget was divided,
        a batch refused for the budget says how it was divided."""
        with self._budget_errors():
            yield from _read(stream, self._layout_hint)

    def _runs(self, stream: _native.Handle, start: int, worker: int) -> Iterator[Steps]:
        """Worker ``worker``'s rows of each run of steps from ``start``, from a
        stream that shares steps, one Steps each (see croupier._runs).

        A batch from Go holds consecutive steps, so it may end one run and
        begin the next, and a run may take several batches: a run is written
        as the slices of the batches that hold it, one after the other. Where
        each run ends is the Go stream's answer (``Outbox.run_bytes``), the
        same in every worker.
        """
        end = self.steps_per_epoch
        outbox = Outbox(worker, self._outbox_bytes())

        def run_end(first: int) -> int:
            if first >= end:
                return end
            return _lib.stream_run_end(stream.value, first, RUN_STEPS, outbox.run_bytes())

        run_first = start
        run_last = run_end(run_first)
        parts: list[pa.RecordBatch] = []
        for first, steps, batch in self._batches(stream):
            at = batch.num_columns - 1
            if batch.schema.names[at] != PLACES:
                raise InternalError(f"a shared stream's batch has no {PLACES} column")
            places = numpy_view(batch.column(at))
            cuts = np.searchsorted(places >> 32, np.arange(steps + 1))
            t = first
            while t < first + steps:
                n = min(first + steps, run_last) - t
                lo, hi = cuts[t - first], cuts[t - first + n]
                # Places count steps from the run's first, not the batch's.
                part = batch.slice(lo, hi - lo)
                if first != run_first:
                    moved = places[lo:hi] + ((first - run_first) << 32)
                    part = part.set_column(at, batch.schema.field(at), arrow_ints(moved))
                parts.append(part)
                t += n
                if t == run_last:
                    stats = _lib.stream_stats(stream.value)
                    sent = outbox.send(run_first, run_last - run_first, parts, stats)
                    run_first, parts = run_last, []
                    run_last = run_end(run_first)
                    if t == first + steps:
                        # The batch is in the slot now: let go of it while
                        # torch waits to take the run (a step of a row far
                        # larger than the rest would be held twice).
                        del batch, places, part
                    yield sent

    def _step_sizes(self, steps: int, rows: int) -> list[int]:
        """The rows of each of ``steps`` consecutive steps that hold ``rows`` together.

        A batch of several steps has :attr:`rank_batch_size` rows in each but
        the epoch's last, which may be partial; a step of a grouped permutation
        (docs/concepts.md, "Groups") or a token-budget step has its own size,
        and comes alone.
        """
        size = self.rank_batch_size
        return [size] * (steps - 1) + [rows - size * (steps - 1)]

    def rows_of_step(self, step: int, epoch: int | None = None) -> np.ndarray:
        """The row ids of global step ``step`` of :attr:`epoch` (or of ``epoch``),
        every rank's, rank 0's first: the samples that step trains on.

        The same whatever this dataset's rank, world size and workers; with
        :meth:`croupier.Table.take` on the source's table it gives the rows
        themselves (provenance: which rollouts trained a checkpoint). A grouped
        permutation's step holds whole groups (docs/concepts.md, "Groups"), a
        token-budget step the rows its budget takes.

        Raises:
            InvalidArgumentError: ``step`` is outside the epoch's steps
                or ``epoch`` is negative.
        """
        epoch = self._epoch if epoch is None else _args.integer("epoch", epoch)
        step = _args.integer("step", step, 0, self._steps(epoch) - 1)
        ranks = _lib.dataset_step(self._handle(), epoch, step)
        return np.array([row for rank in ranks for row in rank], dtype=np.uint64)

    # -- as a source of a croupier.Mixture (the Go core's loader.Source) ----------------

    def _source_position(self, start: bool) -> dict[str, Any]:
        """This dataset's cursor in a mixture's position: at its start, or where
        the dataset stands."""
        if start:
            return {"epoch": 0, "steps_consumed": 0}
        return {"epoch": self.epoch, "steps_consumed": self.steps_consumed}

    def _slot_rows(self, slot: Mapping[str, Any]) -> np.ndarray:
        """The rows of the step that fills a mixture slot ``{"epoch", "step"}``."""
        return self.rows_of_step(slot["step"], slot["epoch"])

    def stats(self) -> dict[str, int]:
        """Counters of the iteration running in this process, or of the last one.

        Keys: ``steps`` and ``rows`` delivered; ``stall_ns``, the time spent
        waiting for a batch still being read (the loader was the bottleneck);
        ``ready``, batches read ahead; ``held_bytes``, rows kept now for steps
        ahead, ``held_peak`` the most kept at once, ``held_limit`` the share of
        ``memory_budget`` for them, ``horizon_steps``, the steps of the last
        horizon, and ``horizons``, the horizons planned; ``ahead_bytes``, the
        bytes of the batches read ahead, ``ahead_peak`` the most at once,
        ``ahead_limit`` their share; ``fetched_bytes``, the bytes fetched from
        the store and not yet decoded, ``fetched_peak`` the most at once,
        ``fetch_limit`` their share; ``largest_row``, the bytes of the largest
        row dealt, and ``large_page`` and ``large_dictionary``, the largest data
        page and dictionary page charged whole to the rows kept (a page of rows
        far larger than their neighbours; 0 while none was): the allowance of
        the memory bound (docs/tuning.md); and ``step_bytes``, the guessed bytes of
        one step as the budget is divided; ``bytes_read`` and ``requests`` made
        to the store, and ``hedged``, requests sent again because the first
        answer was late; ``row_groups`` decoded and ``decoded_bytes``, the bytes
        of the pages they decoded; ``kept_rows`` and ``kept_bytes`` copied out
        of them for the steps; ``fetch_ns`` and ``decode_ns``, summed over
        parallel work; ``cache_hits`` and ``cache_hit_bytes``, the blocks the
        disk cache served instead of the store and the bytes of reads they held,
        and ``cache_unstored``, the blocks fetched that it could not keep (its
        disk full or unwritable; see :func:`~croupier.open_table`). Empty before
        the first iteration.

        Under :class:`croupier.DataLoader` with workers that send runs of steps
        (no ``collate``, ``collate_fn`` or ``pin_memory``), the dataset in the
        training process has its workers' counters as of the last run each sent,
        combined (:func:`merge_stats`): ``horizon_steps`` and ``step_bytes``
        are the most of any worker, every other key the sum over the workers,
        the peaks too: ``held_peak`` is the sum of each worker's most rows kept
        at once, which bounds what the process tree kept at once, against
        ``held_limit``, the sum of their shares; ``sent_peak`` is the most bytes
        of runs a worker's slots held at once, ``sent_limit`` their share of the
        budget (see ``croupier._runs``) and ``sent_alone`` the largest run that
        crossed alone, above it, each summed over the workers. What the budget
        bounds over the process tree is then ``held_peak + ahead_peak +
        sent_peak`` (docs/tuning.md). With other loaders, or
        workers that convert batches themselves, each worker process has its own
        counters and this process's stay empty.
        """
        stream = self._stream() if self._stream is not None else None
        if stream is not None and not stream.closed:
            return _lib.stream_stats(stream.value)
        return dict(self._stats)

    # -- checkpoints -----------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint of docs/concepts.md ("Checkpoints"): a small JSON-serialisable dict.

        ``steps_consumed`` counts global steps delivered to the training loop.

        Raises:
            RuntimeError: the dataset was sent to worker processes by a plain
                ``torch.utils.data.DataLoader``, which cannot tell it what was
                delivered.
        """
        if _in_main_process() and self._shipped and not self._loader_counts:
            raise RuntimeError(
                "StreamingDataset.state_dict(): this dataset was sent to DataLoader worker "
                "processes by a plain torch.utils.data.DataLoader, which cannot report which "
                "steps reached the training loop, so the position would be stale. Use "
                "croupier.DataLoader (its state_dict() and the dataset's are exact after every "
                "batch) or torchdata.stateful_dataloader.StatefulDataLoader (checkpoint with "
                "loader.state_dict())."
            )
        position = {**self._source_position(start=False), "worker_position": self._worker_position}
        return _lib.source_checkpoint(self._handle(), position)

    # -- what croupier.DataLoader asks of the datasets it reads (dataloader.LoaderHooks)

    def _loader_collates(self) -> list[Callable[[Any], Any] | None]:
        return [self._collate]

    def _tell_workers(self, loader: DataLoader, starting: bool) -> None:
        import torch.utils.data

        self._send_runs = (
            starting
            and not self.tokens_per_step  # runs are cut by a fixed number of rows a step
            and self._collate is None
            and loader.collate_fn is torch.utils.data.default_convert
            and not loader.pin_memory
        )
        self._divide_budget = starting and loader.divide_budget

    def _from_workers(self, loader: DataLoader, items: Iterator[Any]) -> Iterator[Any]:
        """The batches the workers send, counted as they are handed over: single
        converted steps, or runs of steps whose parts every worker sends in turn,
        merged and converted here (croupier._runs)."""
        workers: dict[int, dict[str, int]] = {}  # each worker's counters, as last sent
        parts: list[Steps] = []  # of the run being gathered, from workers 0, 1, ...
        slots: dict[tuple[int, int], Any] = {}  # the workers' tensors (see croupier._runs)
        schema = None  # of the merged runs
        warned = False  # BudgetWarning, once
        for batch in items:
            if not isinstance(batch, Steps):
                self._count_delivered()
                yield batch
                continue
            workers[batch.worker] = batch.stats
            self._stats = merge_stats(workers.values(), shared=True)
            # torch takes one item from each worker in turn, and every worker
            # sends its rows of every run: the parts of a run come one after
            # the other, and each run begins at the next step.
            if batch.first != self.steps_consumed or batch.worker != len(parts):
                raise InternalError(
                    f"croupier.DataLoader: worker {batch.worker} sent steps {batch.first} to "
                    f"{batch.first + batch.steps - 1} of epoch {self.epoch} when worker "
                    f"{len(parts)}'s rows of the run from step {self.steps_consumed} were next"
                )
            parts.append(batch)
            if not warned and (text := batch.overrun()):
                warned = True
                warnings.warn(text, BudgetWarning, stacklevel=2)
            if len(parts) < loader.num_workers:
                continue
            rows, sizes = merge_runs(parts, slots, schema)
            parts, schema = [], rows.schema
            for out in self._convert(rows, sizes):
                out = loader.collate_fn(out)
                self._count_delivered()
                yield out

    def _loader_length(self) -> int:
        return len(self)

    def _loader_load(self, state_dict: Mapping[str, Any], table_moved: bool) -> None:
        self.load_state_dict(state_dict, table_moved=table_moved)

    def load_state_dict(self, state_dict: Mapping[str, Any], *, table_moved: bool = False) -> None:
        """Continue from a checkpoint: the next iteration starts at its position.

        The dict may come from a run with any world size and any number of
        workers; the remaining steps are exactly those of the uninterrupted run.
        Its table is recognised by ``table_id`` (the pinned files, see
        docs/spec.md), so another spelling of the table's URI, or a copy of a
        croupier table elsewhere, resumes; ``table_version`` may be an int or a
        string. A dict of format 1, which has no ``table_id``, must name the
        table by the same URI.

        Args:
            state_dict: a dict from :meth:`state_dict`.
            table_moved: the table was moved or copied on purpose: do not compare
                ``table_uri`` and ``table_version`` (a copy of a plain dataset has
                new modification times, so a new version). ``table_id``, when the
                dict has one, must still match: the same files, sizes and rows.

        Raises:
            InvalidArgumentError: the dict's format or one of its keys is
                unknown, it describes another permutation, table version, ``num_splits``,
                ``global_batch_size`` or ``shuffle_seed`` (the message names the
                field and both values), or its ``epoch`` is negative or its
                ``steps_consumed`` outside ``[0, steps_per_epoch]``.
        """
        worker = _torch.worker_info()
        position = _lib.source_restore(
            self._handle(),
            state_dict,
            {"table_moved": table_moved, "workers": worker.num_workers if worker else 0},
        )
        self._set_position(position["epoch"], position["steps_consumed"])
        self._worker_position = bool(position.get("worker_position", False))

    def __repr__(self) -> str:
        steps = (
            f"T={self.tokens_per_step}"
            if self.tokens_per_step
            else f"G={self.global_batch_size} S={self.num_splits}"
        )
        return (
            f"<croupier.StreamingDataset {self._info['table_uri']} "
            f"{steps} rank={self.rank}/"
            f"{self.world_size} steps_per_epoch={self.steps_per_epoch} "
            f"epoch={self._epoch} steps_consumed={self._next_step}>"
        )
