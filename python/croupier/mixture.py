"""``Mixture``: the steps of several datasets interleaved by weight, deterministically.

A training mix (70 % web, 20 % code, 10 % math, moving to more math later)
must be as reproducible as one dataset: which source a step draws from may
not depend on the world size, the number of DataLoader workers, the timing of
reads or a restart. Here it is a pure function of the seed, the step, and the
weights at that step (docs/concepts.md, "Mixtures"):

- mixture step t has ``slots`` slots; slot j draws u(t, j), the first 8 bytes
  (little endian) of SHA-256 of ``"croupier/mixture\\0<seed>\\0<t>\\0<j>"``
  divided by 2**64;
- the weights at t are the schedule's, linear between its points
  (``w(t) = w_a + (w_b - w_a) * (t - t_a) / (t_b - t_a)`` for points
  t_a <= t < t_b), those of the last point after it; sources out of the draw
  (exhausted, under ``on_exhausted="renormalize"``) weigh 0;
- the slot goes to the first source i whose cumulative weight
  ``w_0 + ... + w_i`` exceeds ``u * (w_0 + ... + w_n)``;
- it is filled with that source's next step, in the source's own dealing
  order (each source is a :class:`~croupier.StreamingDataset`, a
  :class:`~croupier.FollowingDataset` or a :class:`Mixture`, whose steps are
  the same at every world size; a slot a mixture fills holds that mixture's
  step, its own slots).

The rule, the reading of the sources' steps and the checks of state dicts are
the Go core's (``loader.Mixture``), reached through the C ABI: this module
keeps the mixture's position and converts the batches.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias, get_args

import pyarrow as pa

from . import _args, _lib, _native, _torch
from ._args import OnExhausted
from .dataset import LoaderHooks, StreamingDataset, load_without_table_moved, refuse_batching
from .errors import InternalError, InvalidArgumentError
from .follow import FollowingDataset

if TYPE_CHECKING:
    from .dataloader import DataLoader

__all__ = ["ON_EXHAUSTED", "STATE_FORMAT", "Mixture", "MixtureStep"]

ON_EXHAUSTED: tuple[OnExhausted, ...] = get_args(OnExhausted)
STATE_FORMAT = 1


class MixtureStep:
    """One mixture step made by a :class:`croupier.DataLoader` worker, on its way
    to the main process: the step's number, its slots (``(source index,
    batch)`` pairs) and the mixture's position after it, which the main
    process takes once it hands the slots to the training loop."""

    __slots__ = ("next", "slots", "step")

    def __init__(self, step: int, slots: list[tuple[int, Any]], next: dict[str, Any]) -> None:
        self.step, self.slots, self.next = step, slots, next


Source: TypeAlias = "StreamingDataset | FollowingDataset | Mixture"
"""What a :class:`Mixture` mixes: datasets of a pinned table, growing tables
followed, and mixtures of them."""

PlannedSlot: TypeAlias = "tuple[int, int, int] | tuple[int, int, int, list[PlannedSlot]]"
"""A slot as :meth:`Mixture.plan` names it: ``(source index, source epoch,
source step)``, and for a slot a mixture fills, that mixture's step's own
slots after them (the epoch is then 0, the step the mixture's)."""


class Mixture(_torch.IterableDataset, _native.GoObject, LoaderHooks):
    """Interleaves the steps of several datasets by weight.

    Args:
        sources: ``(dataset, weight)`` pairs: the datasets of one rank (the same
            ``rank`` and ``world_size``), and their weights at step 0. A dataset
            is a :class:`~croupier.StreamingDataset`, a
            :class:`~croupier.FollowingDataset` or a :class:`Mixture`: a learner
            mixes the rollouts it follows with a pinned replay or SFT table, or
            with a mixture of both. A followed source's slot waits for the
            versions of its round, as following does; when its wait times out
            the iteration ends (it cannot cycle). A mixture's slot takes that
            mixture's next step, drawn by its own seed, schedule and slots; it
            has no step left when its iteration ends, and its next iteration
            starts where :meth:`state_dict` says a new iteration of its own would.
        seed: seeds which source fills each slot (an integer in [0, 2**64 - 1]).
        schedule: optional ``(step, weights)`` points after step 0, steps
            increasing, one weight per source: the weights move linearly from
            one point to the next and stay at the last.
        on_exhausted: when a slot draws a source whose epoch has no step left:
            ``"stop"`` ends the iteration before that step; ``"cycle"`` takes the
            first step of the source's next epoch; ``"renormalize"`` takes the
            source out of the draw and draws the slot again with the same number
            among the others, ending the iteration when none is left.
        slots: slots of each mixture step.

    Iterating yields, for each mixture step, a list of ``slots`` pairs
    ``(source index, batch)``, the batch in the source's format; for a slot a
    mixture fills, in place of the batch, the list that mixture's step would
    yield. When an
    iteration ends, each source whose epoch ended moves to its next epoch, and
    the next iteration continues the steps. Under :class:`croupier.DataLoader`
    with K workers, worker k makes steps k, k + K, ... of the iteration and
    the loader hands them over in order: the steps are those of 0 workers, and
    :meth:`state_dict` is exact after every step. Each worker's sources hold
    their memory budgets, divided by K unless ``divide_budget=False``.

    Raises:
        InvalidArgumentError: no source, sources of different ranks or world
            sizes, weights that are negative, not finite or all 0, or a schedule
            whose steps do not increase or whose points have another number of
            weights.
    """

    def __init__(
        self,
        sources: Sequence[tuple[Source, float]],
        *,
        seed: int,
        schedule: Sequence[tuple[int, Sequence[float]]] | None = None,
        on_exhausted: OnExhausted = "stop",
        slots: int = 1,
    ) -> None:
        super().__init__()
        if not sources:
            raise InvalidArgumentError("a Mixture needs at least one source")
        self._sources: list[Source] = [ds for ds, _ in sources]
        for i, ds in enumerate(self._sources):
            if not isinstance(ds, (StreamingDataset, FollowingDataset, Mixture)):
                raise TypeError(
                    f"source {i} must be a croupier.StreamingDataset, FollowingDataset or "
                    f"Mixture, got {type(ds).__name__}"
                )
        self._slots = _args.integer("slots", slots, 1)
        # The most record batches a step holds: Go's Mixture.MaxRecords.
        self._records: int = self._slots * max(
            ds._records if isinstance(ds, Mixture) else 1 for ds in self._sources
        )
        self._options: dict[str, Any] = {
            "seed": _args.integer("seed", seed, 0, _args.UINT64_MAX),
            "weights": _weights(0, [w for _, w in sources]),
            "schedule": [
                [_args.integer("schedule step", t), _weights(t, w)] for t, w in schedule or []
            ],
            "on_exhausted": _args.text("on_exhausted", on_exhausted),
            "slots": self._slots,
        }
        self._closed = False
        self._go: _native.Handle | None = self._open_go()  # checks the options
        self._position: dict[str, Any] = self._start(start=False)
        # Set by croupier.DataLoader on the copies its workers get: it takes
        # each step's position in the main process (see MixtureStep).
        self._in_loader = False

    # -- lifetime ------------------------------------------------------------------

    def _open_go(self) -> _native.Handle:
        return _lib.mixture_open([ds._handle() for ds in self._sources], self._options)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_go"] = None  # handles do not cross processes; the sources pickle theirs
        return state

    # -- position --------------------------------------------------------------------

    @property
    def sources(self) -> list[Source]:
        """The mixture's datasets, in the order of their weights."""
        return list(self._sources)

    @property
    def steps_consumed(self) -> int:
        """Mixture steps delivered; the next iteration starts at this step."""
        return int(self._position["steps_consumed"])

    def weights_at(self, step: int) -> list[float]:
        """The sources' weights at mixture step ``step``, as the schedule gives them."""
        return _lib.mixture_weights(self._handle(), _args.integer("step", step))

    def plan(self, steps: int) -> list[list[PlannedSlot]]:
        """What the next ``steps`` mixture steps hold, without reading them: for
        each step, each slot's ``(source index, source epoch, source step)``,
        and for a slot a mixture fills its step's own slots after them.
        Fewer steps when the iteration ends before; the position stays."""
        plan = _lib.mixture_plan(
            self._handle(), self._position, _args.integer("steps", steps, 0, _args.INT64_MAX)
        )
        return [[_planned(s) for s in step] for step in plan["steps"]]

    def rows_of_step(self, step: int, epoch: int | None = None) -> list[tuple[int, Any]]:
        """The rows of mixture step ``step``: for each slot, as iterating yields
        them, ``(source index, row ids)``, the row ids every rank's of the
        source's step that fills the slot (its
        :meth:`~croupier.StreamingDataset.rows_of_step`, or
        :meth:`~croupier.FollowingDataset.rows_of_step` for the global step a
        followed source deals; for a slot a mixture fills, that mixture's
        step's list of pairs alike): the samples the step trains on, source
        by source.

        A step not before the mixture's position is planned from it; one before
        it by replaying the mixture from its start, every source at step 0 of
        epoch 0, iteration after iteration (the rule of ``croupier deal
        --checkpoint MIXTURE.json --step T``). A mixture has one sequence of
        steps and no epochs: ``epoch`` is None or 0.

        Raises:
            InvalidArgumentError: ``step`` is negative, ``epoch`` is not 0, or
                no iteration reaches ``step``.
        """
        if epoch is not None:
            _args.integer("epoch", epoch, 0, 0)
        step = _args.integer("step", step)
        position: dict[str, Any] = self._position
        if step < self.steps_consumed:
            position = self._start(start=True)
        at = position["steps_consumed"]
        empty = False  # the last plan ended an iteration without a step
        while True:
            plan = _lib.mixture_plan(self._handle(), position, step - at + 1)
            if len(plan["steps"]) > step - at:
                slots = plan["steps"][step - at]
                break
            if empty and not plan["steps"]:
                raise InvalidArgumentError(
                    f"mixture step {step} is past the last step its sources deal (step {at})"
                )
            empty = not plan["steps"]
            at, position = at + len(plan["steps"]), plan["position"]
        return self._slot_rows({"slots": slots})

    # -- as a source of another croupier.Mixture (the Go core's loader.Source) ----------

    def _start(self, start: bool) -> dict[str, Any]:
        """This mixture's position before its first step: its sources at their
        start, or where they stand."""
        return {
            "steps_consumed": 0,
            "sources": [ds._source_position(start) for ds in self._sources],
            "out_of_draw": [False] * len(self._sources),
        }

    def _source_position(self, start: bool) -> dict[str, Any]:
        """This mixture's cursor in another mixture's position: at its start, or
        where it stands."""
        position = self._start(start=True) if start else self._position
        return {"epoch": 0, "steps_consumed": 0, "mixture": position}

    def _slot_rows(self, slot: Mapping[str, Any]) -> list[tuple[int, Any]]:
        """The rows of the mixture step that fills a slot ``{"slots"}``, slot by
        slot as :meth:`rows_of_step` gives them."""
        return [(s["source"], self._sources[s["source"]]._slot_rows(s)) for s in slot["slots"]]

    def _end(self) -> None:
        """The iteration ended: sources whose epoch ended move to their next one."""
        self._position = _lib.mixture_end(self._handle(), self._position)

    # -- iteration -------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        refuse_batching(sys._getframe(1), "Mixture")
        worker = _torch.worker_info()
        if worker is not None and not self._in_loader:
            raise InvalidArgumentError(
                "a Mixture in DataLoader worker processes needs croupier.DataLoader, which "
                "hands its steps over in order and keeps its position; with torch's "
                "DataLoader use num_workers=0"
            )
        k, num_workers = (worker.id, worker.num_workers) if worker is not None else (0, 0)
        stream = _lib.mixture_stream_open(
            self._handle(), self._position, {"worker": k, "num_workers": num_workers}
        )
        try:
            while (item := _lib.mixture_stream_next(stream.value, self._records)) is not None:
                step, info, batches = item
                out = self._convert(info["slots"], iter(batches))
                del item, batches  # the conversions hold what they need
                if worker is not None:
                    yield MixtureStep(step, out, info["next"])
                    continue
                self._position = info["next"]
                yield out
            if worker is None:
                self._end()
        finally:
            stream.close()

    def _convert(
        self, slots: list[dict[str, Any]], batches: Iterator[pa.RecordBatch]
    ) -> list[tuple[int, Any]]:
        """A step's ``(source index, batch)`` pairs, each batch in its source's
        format, taken from ``batches`` depth first (a slot a mixture fills is
        that mixture's step's list)."""
        out: list[tuple[int, Any]] = []
        for s in slots:
            ds = self._sources[s["source"]]
            if isinstance(ds, Mixture):
                out.append((s["source"], ds._convert(s["slots"], batches)))
                continue
            batch = next(batches)
            converted = next(iter(ds._convert(batch, [batch.num_rows])))
            if ds._collate is not None:
                converted = ds._collate(converted)
            out.append((s["source"], converted))
        return out

    # -- checkpoints -----------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The mixture's position: its step, each source's identity and cursor, and
        the mixing parameters, as a JSON-serialisable dict."""
        return _lib.mixture_checkpoint(self._handle(), self._position)

    # -- what croupier.DataLoader asks of the datasets it reads (dataloader.LoaderHooks)

    def _loader_collates(self) -> list[Callable[[Any], Any] | None]:
        return [collate for source in self._sources for collate in source._loader_collates()]

    def _tell_workers(self, loader: DataLoader, starting: bool) -> None:
        self._in_loader = starting
        for source in self._sources:
            if isinstance(source, Mixture):
                source._tell_workers(loader, starting)  # its sources divide the budget too
            else:
                source._divide_budget = starting and loader.divide_budget

    def _from_workers(self, loader: DataLoader, items: Iterator[Any]) -> Iterator[Any]:
        """The steps the workers send, single converted steps with the mixture's
        position after each (MixtureStep), each taking the mixture to that
        position as it is handed over, up to the first that is not the next.

        Worker k of K sends steps k, k + K, ...: they arrive in step order
        until a worker's followed source waits out its round before its next
        step while the others go on (each worker waits on its own, and a
        version may land between their timeouts). The iteration then ends at
        the last step delivered in order, as it ends where a followed source's
        wait times out without workers; the steps the workers made after it
        are dealt again by the next iteration."""
        for step in items:
            if isinstance(step, MixtureStep) and step.step > self.steps_consumed:
                break  # a worker ended before this step: see above
            if not isinstance(step, MixtureStep) or step.step != self.steps_consumed:
                got = step.step if isinstance(step, MixtureStep) else type(step).__name__
                raise InternalError(
                    f"croupier.DataLoader: a worker sent mixture step {got} when step "
                    f"{self.steps_consumed} was next"
                )
            out = loader.collate_fn(step.slots)
            self._position = step.next
            yield out
        self._end()

    def _loader_length(self) -> int:
        raise TypeError("a croupier.Mixture has no length: its iterations end when a source does")

    def _loader_load(self, state_dict: Mapping[str, Any], table_moved: bool) -> None:
        load_without_table_moved(self, state_dict, table_moved)

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from a :meth:`state_dict`, at any world size.

        Raises:
            InvalidArgumentError: the dict describes another mixture: another
                format, seed, schedule, policy or number of slots or sources, or a
                source another dataset would refuse (its permutation, table or
                dealing parameters; the message names the source and the field).
        """
        self._position = _lib.mixture_resume(self._handle(), state_dict)


def _planned(slot: Mapping[str, Any]) -> PlannedSlot:
    """A slot of ``croupier_mixture_plan`` as :meth:`Mixture.plan` names it."""
    if "slots" in slot:
        return (slot["source"], slot["epoch"], slot["step"], [_planned(s) for s in slot["slots"]])
    return (slot["source"], slot["epoch"], slot["step"])


def _weights(step: Any, weights: Sequence[Any]) -> list[float]:
    """The weights of the point at ``step`` as floats, which JSON carries to Go:
    finite numbers >= 0."""
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise InvalidArgumentError(f"the weights at step {step} must be a sequence of numbers")
    for w in weights:
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < math.inf:
            raise InvalidArgumentError(
                f"the weights at step {step} must be finite numbers >= 0, got {list(weights)!r}"
            )
    return [float(w) for w in weights]
