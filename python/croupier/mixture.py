"""``Mixture``: the steps of several datasets interleaved by weight, deterministically.

A training mix (70 % web, 20 % code, 10 % math, moving to more math later)
must be as reproducible as one dataset: which source a step draws from may
not depend on the world size, the timing of reads or a restart. Here it is a
pure function of the seed, the step, and the weights at that step
(docs/concepts.md, "Mixtures"):

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
  order (each source is a :class:`~croupier.StreamingDataset`, so its steps are
  the same at every world size).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch.utils.data

from . import _args
from .dataset import StreamingDataset, _read
from .errors import InvalidArgumentError

__all__ = ["ON_EXHAUSTED", "STATE_FORMAT", "Mixture"]

ON_EXHAUSTED = ("stop", "cycle", "renormalize")
STATE_FORMAT = 1


def draw(seed: int, step: int, slot: int) -> float:
    """The uniform number in [0, 1) that decides slot ``slot`` of step ``step``."""
    digest = hashlib.sha256(f"croupier/mixture\0{seed}\0{step}\0{slot}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


def weights_at(points: Sequence[tuple[int, Sequence[float]]], step: int) -> list[float]:
    """The weights of the piecewise-linear schedule ``points`` at ``step``."""
    after = next((k for k, (t, _) in enumerate(points) if t > step), len(points))
    if after == len(points):
        return list(points[-1][1])
    (ta, wa), (tb, wb) = points[after - 1], points[after]
    return [a + (b - a) * (step - ta) / (tb - ta) for a, b in zip(wa, wb, strict=True)]


def pick(u: float, weights: Sequence[float]) -> int | None:
    """The source a draw ``u`` selects, or None when every weight is 0."""
    total = math.fsum(weights)
    if total <= 0:
        return None
    cumulative = 0.0
    for i, w in enumerate(weights):
        cumulative += w
        if w > 0 and cumulative > u * total:
            return i
    return max(i for i, w in enumerate(weights) if w > 0)  # u * total rounded up to total


class Mixture(torch.utils.data.IterableDataset):
    """Interleaves the steps of several :class:`~croupier.StreamingDataset` by weight.

    Args:
        sources: ``(dataset, weight)`` pairs: the datasets of one rank (the same
            ``rank`` and ``world_size``), and their weights at step 0.
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
    ``(source index, batch)``, the batch in the source's format. When an
    iteration ends, each source whose epoch ended moves to its next epoch, and
    the next iteration continues the steps. Mixtures deal in the process that
    iterates them: use them without DataLoader worker processes.

    Raises:
        InvalidArgumentError: no source, sources of different ranks or world
            sizes, weights that are negative, not finite or all 0, or a schedule
            whose steps do not increase or whose points have another number of
            weights.
    """

    def __init__(
        self,
        sources: Sequence[tuple[StreamingDataset, float]],
        *,
        seed: int,
        schedule: Sequence[tuple[int, Sequence[float]]] | None = None,
        on_exhausted: str = "stop",
        slots: int = 1,
    ) -> None:
        super().__init__()
        if not sources:
            raise InvalidArgumentError("a Mixture needs at least one source")
        self._sources = [ds for ds, _ in sources]
        for i, ds in enumerate(self._sources):
            if not isinstance(ds, StreamingDataset):
                raise TypeError(
                    f"source {i} must be a croupier.StreamingDataset, got {type(ds).__name__}"
                )
            if (ds.rank, ds.world_size) != (self._sources[0].rank, self._sources[0].world_size):
                raise InvalidArgumentError(
                    f"source {i} is rank {ds.rank} of {ds.world_size}, source 0 rank "
                    f"{self._sources[0].rank} of {self._sources[0].world_size}: "
                    "a Mixture deals one rank"
                )
        self._seed = _args.integer("seed", seed, 0, _args.UINT64_MAX)
        self._slots = _args.integer("slots", slots, 1)
        if on_exhausted not in ON_EXHAUSTED:
            raise InvalidArgumentError(
                f"on_exhausted={on_exhausted!r} is not one of {', '.join(ON_EXHAUSTED)}"
            )
        self._on_exhausted = on_exhausted
        points = [(0, [w for _, w in sources]), *(schedule or [])]
        self._points = [(int(t), self._weights(t, w)) for t, w in points]
        for (ta, _), (tb, _) in itertools.pairwise(self._points):
            if not tb > ta:
                raise InvalidArgumentError(
                    f"schedule steps must increase after step 0, got {tb} after {ta}"
                )
        if not any(self._points[0][1]):
            raise InvalidArgumentError("the weights at step 0 are all 0")
        self._step = 0
        self._cursors = [(ds.epoch, ds.steps_consumed) for ds in self._sources]
        self._out = [False] * len(self._sources)  # out of the draw (renormalize)

    def _weights(self, step: Any, weights: Sequence[Any]) -> list[float]:
        """Checked weights of the point at ``step``."""
        if len(weights) != len(self._sources):
            raise InvalidArgumentError(
                f"the weights at step {step} are {len(weights)}, for {len(self._sources)} sources"
            )
        for w in weights:
            if isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 <= w < math.inf:
                raise InvalidArgumentError(
                    f"the weights at step {step} must be finite numbers >= 0, got {list(weights)!r}"
                )
        return [float(w) for w in weights]

    @property
    def steps_consumed(self) -> int:
        """Mixture steps delivered; the next iteration starts at this step."""
        return self._step

    def _choose(self, step: int, slot: int) -> int | None:
        """The source that fills ``slot`` of ``step`` now, or None if the iteration ends."""
        u = draw(self._seed, step, slot)
        while True:
            weights = [
                0.0 if out else w
                for w, out in zip(weights_at(self._points, step), self._out, strict=True)
            ]
            i = pick(u, weights)
            if i is None:
                return None
            epoch, done = self._cursors[i]
            if done < self._sources[i]._steps(epoch):
                return i
            if self._on_exhausted == "stop":
                return None
            if self._on_exhausted == "cycle":
                self._cursors[i] = (epoch + 1, 0)
                return i
            self._out[i] = True

    def __iter__(self) -> Iterator[list[tuple[int, Any]]]:
        if torch.utils.data.get_worker_info() is not None:
            raise InvalidArgumentError(
                "a Mixture deals in the process that iterates it: use it without "
                "DataLoader worker processes (num_workers=0)"
            )
        streams: dict[int, _SourceStream] = {}
        try:
            while True:
                chosen = []
                saved = (list(self._cursors), list(self._out))
                for slot in range(self._slots):
                    i = self._choose(self._step, slot)
                    if i is None:
                        break
                    chosen.append(i)
                    epoch, done = self._cursors[i]
                    self._cursors[i] = (epoch, done + 1)
                if len(chosen) < self._slots:
                    self._cursors, self._out = saved  # the step is not dealt
                    self._end()
                    return
                out, reads = [], saved[0]  # where each source's next step is read
                for i in chosen:
                    out.append((i, self._next_step(i, streams, reads[i])))
                    reads[i] = streams[i].position  # a later slot of the same source follows on
                self._step += 1
                yield out
        finally:
            for stream in streams.values():
                stream.close()

    def _next_step(self, i: int, streams: dict[int, _SourceStream], cursor: tuple[int, int]) -> Any:
        """Source ``i``'s step after ``cursor``, read from its open stream when it
        is there, else from a stream opened at the cursor."""
        epoch, done = cursor
        if done == self._sources[i]._steps(epoch):
            epoch, done = epoch + 1, 0  # cycled
        held = streams.get(i)
        if held is None or held.position != (epoch, done):
            if held is not None:
                held.close()
            streams[i] = held = _SourceStream(self._sources[i], epoch, done)
        return held.next()

    def _end(self) -> None:
        """The iteration ended: sources whose epoch ended move to their next one."""
        for i, ds in enumerate(self._sources):
            epoch, done = self._cursors[i]
            if done >= ds._steps(epoch):
                self._cursors[i] = (epoch + 1, 0)
        self._out = [False] * len(self._sources)

    def state_dict(self) -> dict[str, Any]:
        """The mixture's position: its step, each source's identity and cursor, and
        the mixing parameters, as a JSON-serialisable dict."""
        return {
            "format": STATE_FORMAT,
            "seed": self._seed,
            "schedule": [[t, w] for t, w in self._points],
            "on_exhausted": self._on_exhausted,
            "slots": self._slots,
            "steps_consumed": self._step,
            "out_of_draw": list(self._out),
            "sources": [
                {**ds.state_dict(), "epoch": e, "steps_consumed": s}
                for ds, (e, s) in zip(self._sources, self._cursors, strict=True)
            ],
        }

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue from a :meth:`state_dict`, at any world size.

        Raises:
            InvalidArgumentError: the dict describes another mixture: another
                format, seed, schedule, policy or number of slots or sources, or a
                source another dataset would refuse (its permutation, table or
                dealing parameters; the message names the source and the field).
        """
        mine = self.state_dict()
        for field in ("format", "seed", "schedule", "on_exhausted", "slots"):
            theirs = state_dict.get(field)
            if field == "schedule" and isinstance(theirs, list):
                theirs = [[t, [float(x) for x in w]] for t, w in theirs]
            if theirs != mine[field]:
                raise InvalidArgumentError(
                    f"mixture state dict {field} is {state_dict.get(field)!r} but this "
                    f"mixture's {field} is {mine[field]!r}"
                )
        sources = state_dict.get("sources")
        if not isinstance(sources, list) or len(sources) != len(self._sources):
            got = len(sources) if isinstance(sources, list) else repr(sources)
            raise InvalidArgumentError(
                f"mixture state dict has {got} sources, this mixture {len(self._sources)}"
            )
        cursors = []
        for i, (ds, sd) in enumerate(zip(self._sources, sources, strict=True)):
            probe = {"epoch": ds.epoch, "steps_consumed": ds.steps_consumed}
            try:
                ds.load_state_dict(sd)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"mixture source {i}: {exc}") from exc
            cursors.append((int(sd["epoch"]), int(sd["steps_consumed"])))
            ds._set_position(probe["epoch"], probe["steps_consumed"])
        out = state_dict.get("out_of_draw")
        if not isinstance(out, list) or len(out) != len(self._sources):
            raise InvalidArgumentError(f"mixture state dict out_of_draw is {out!r}")
        self._step = _args.integer(
            "mixture state dict steps_consumed", state_dict.get("steps_consumed")
        )
        self._cursors, self._out = cursors, [bool(x) for x in out]


class _SourceStream:
    """One source's steps in order from (epoch, step), converted, one at a time."""

    def __init__(self, ds: StreamingDataset, epoch: int, step: int) -> None:
        self._ds = ds
        self.position = (epoch, step)
        self._stream = ds._open_stream(
            {
                "epoch": epoch,
                "start_step": step,
                "worker": 0,
                "num_workers": 0,
                "run": 1,
                "coalesce_bytes": 0,
            }
        )
        self._batches = _read(self._stream)

    def next(self) -> Any:
        _, steps, batch = next(self._batches)
        assert steps == 1
        out = next(iter(self._ds._convert(batch, [batch.num_rows])))
        if self._ds._collate is not None:
            out = self._ds._collate(out)
        epoch, step = self.position
        self.position = (epoch, step + 1)
        return out

    def close(self) -> None:
        self._stream.close()
