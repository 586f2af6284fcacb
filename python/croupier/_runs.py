"""Runs of steps from croupier.DataLoader's workers to its main process.

The K workers share every step: each deals the rows of its own blocks of the
table (the Go core's shared streams), so a page is decoded by one worker, and
each keeps rows in 1/K of the memory budget for as many steps ahead as one
process does in all of it; workers taking turns at steps would each decode
most of the pages of their steps. Each worker sends its rows of every run of
``RUN_STEPS`` consecutive steps, with a column that says where each goes (its
step in the run, its index in the step); torch takes one item from each
worker in turn, so the main process gets the K parts of a run one after the
other, merges them in Go (:func:`merge_runs`) and converts the run.

torch hands each tensor from a worker to the main process through a
shared-memory file of its own, passed over a socket: about 1.5 ms a run on
2 cores, more than the worker takes to deal it. Anything else crosses
pickled through a pipe, copied twice more. So each worker writes its runs, in
Arrow's IPC stream format, into a few shared-memory slots of its own
(:class:`Outbox`) that cross once each, and a run crosses as the number of
its slot (:class:`Steps`); the main process reads the rows in place and
frees the slot for the worker once it has merged the run, which copies them.
torch asks each worker for at most ``prefetch_factor`` items ahead, so a
worker needs that many slots and two more (the one being merged, the one
being written).

Runs count against the memory budget by the bytes of their slots: where
croupier.DataLoader divides the budget, a worker's Go stream gets three
quarters of its share and its slots the other quarter. A worker writes a run
only when the slots waiting for the main process leave room for it, or when
none waits (a run larger than the quarter crosses alone); the main process
frees a slot once it has merged its run. Runs of rows so large that three
would not fit are cut shorter (``Outbox.run_bytes``), and a step holding a
row far larger than the rest goes alone, or with steps small enough beside
it: the worker holds its part of one run while it writes it, and the main
process one merged run. So the workers' streams and runs together hold the
budget, and the main process one merged run beside it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from . import _lib, _torch

if TYPE_CHECKING:
    import torch

__all__ = ["PLACES", "RUN_STEPS", "Outbox", "Steps", "merge_runs"]

# Steps in each run a worker sends. A run crosses as one item, so torch,
# which keeps prefetch_factor items of each worker in flight, holds up to 16
# times the steps it would with single steps; each worker holds its rows of
# them.
RUN_STEPS = 16
# The column of a shared stream's batches that says where each row goes (the
# C library's croupier_stream_next): its step in the batch << 32 | its index
# in the rank's share of the step.
PLACES = "croupier.places"
# Bytes before a slot's data: its first is 1 from when the worker writes a
# run into it until the main process has merged the run.
_HEADER = 64
# How often a worker whose slots are full looks whether the main process freed one.
_FREED_POLL_S = 0.001


def _ipc(parts: Sequence[pa.RecordBatch], sink: pa.NativeFile) -> None:
    """Write ``parts`` to ``sink`` as one Arrow IPC stream."""
    with pa.ipc.new_stream(sink, parts[0].schema) as writer:
        for part in parts:
            writer.write_batch(part)


class Steps:
    """One worker's rows of a run of consecutive steps, in a slot of its
    :class:`Outbox`: the run's first global step, its number of steps, and
    its worker's index and the counters of the worker's stream when it was
    sent (:meth:`croupier.StreamingDataset.stats`), which the loader adds up
    over the workers. It carries its slot's memory the first time it uses the
    slot, as it is made or grown.
    """

    __slots__ = ("first", "memory", "size", "slot", "stats", "steps", "worker")

    def __init__(
        self,
        first: int,
        steps: int,
        worker: int,
        stats: dict[str, int],
        slot: int,
        size: int,
        memory: torch.Tensor | None,
    ) -> None:
        self.first, self.steps, self.worker, self.stats = first, steps, worker, stats
        self.slot, self.size, self.memory = slot, size, memory

    def step_numbers(self) -> range:
        """The global steps the run holds, in order."""
        return range(self.first, self.first + self.steps)

    def batches(self, slots: dict[tuple[int, int], torch.Tensor]) -> list[pa.RecordBatch]:
        """The worker's rows of the steps, with their places last, read in place
        from its slot: ``slots`` holds the slots the main process has seen, by
        worker and number, and learns this one's if it carries it."""
        key = (self.worker, self.slot)
        if self.memory is not None:
            slots[key] = self.memory
            self.memory = None
        data = slots[key][_HEADER : _HEADER + self.size].numpy()
        return list(pa.ipc.open_stream(pa.py_buffer(data)))

    def release(self, slots: dict[tuple[int, int], torch.Tensor]) -> None:
        """Give the slot back to the worker: its rows are read no more."""
        slots[(self.worker, self.slot)][0] = 0

    def overrun(self) -> str | None:
        """What to warn (:class:`croupier.BudgetWarning`) when the run holds
        several steps and exceeds its worker's slots' share by more than the
        largest row the worker dealt, else None. A step holding a row of a
        page far larger than the rest goes alone, within the bound's allowance
        for one such row, so such a run holds rows larger than the stream
        guessed and the files declared."""
        limit, largest = self.stats.get("sent_limit", 0), self.stats.get("largest_row", 0)
        if not limit or self.steps < 2 or self.size <= limit + largest:
            return None
        return (
            f"DataLoader worker {self.worker}: the run of steps {self.first} to "
            f"{self.first + self.steps - 1} took {self.size} bytes, more than the {limit} "
            f"bytes of its slots and its largest row ({largest} bytes) together: it holds rows "
            "larger than the stream guessed (rows far larger than the rest that the table's "
            "files do not declare, as values in a dictionary page or pages of a remote file "
            "without an offset index do, or rows far larger than those the guess was made "
            "from), and the process tree may grow past the bound memory_budget states "
            '(docs/tuning.md, "memory_budget is a bound"); read with num_workers=0, give the '
            "budget room for several such rows, or rewrite the table (croupier.rewrite)"
        )


class Outbox:
    """A worker's shared-memory slots, and the runs it writes into them: at most
    ``limit`` bytes of slots waiting for the main process, or one run alone
    (0: no bound)."""

    def __init__(self, worker: int, limit: int = 0) -> None:
        self.worker, self.limit = worker, limit
        self._slots: list[torch.Tensor] = []
        self.peak = 0  # the most bytes of slots waiting at once
        self.alone = 0  # the most bytes of one slot that waited alone, over limit

    def run_bytes(self) -> int:
        """The bytes a run of the workers' parts together may take (0: no
        bound): a third of the workers' quarters, so that a run waits in a slot
        beside two more, and the main process merges one the size of a twelfth
        of the budget. The Go stream ends each run at ``RUN_STEPS`` steps or
        before the step that would take it past these bytes, at its guess of
        a step and of the rows far larger than the rest, the same in every
        worker (``croupier_stream_run_end``): a step holding such a row goes
        alone, or with steps small enough beside it."""
        if not self.limit:
            return 0
        workers = _torch.worker_info()
        return self.limit * (workers.num_workers if workers is not None else 1) // 3

    def waiting(self) -> int:
        """The bytes of the slots whose runs the main process has not merged yet."""
        return sum(len(s) for s in self._slots if s[0] != 0)

    def send(
        self, first: int, steps: int, parts: Sequence[pa.RecordBatch], stats: dict[str, int]
    ) -> Steps:
        """Write the worker's ``parts`` of the ``steps`` steps from ``first`` into a
        free slot; a new one, or one grown, when none has room."""
        counter = pa.MockOutputStream()  # counts the bytes, copies none
        _ipc(parts, counter)
        size = counter.size()
        while self.limit and (waiting := self.waiting()) and waiting + _HEADER + size > self.limit:
            time.sleep(_FREED_POLL_S)
        free = [i for i, s in enumerate(self._slots) if s[0] == 0]
        fits = [i for i in free if len(self._slots[i]) >= _HEADER + size]
        memory = None
        if fits:
            slot = fits[0]
        else:
            # Made in shared memory, as torch.multiprocessing makes the
            # storages it moves there, a quarter larger than needed so that
            # a little more fits later. Tensor.share_memory_() would copy a
            # tensor made first.
            slot = free[0] if free else len(self._slots)
            room = _HEADER + size + size // 4
            torch = _torch.require("a DataLoader worker")
            memory = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(room))
            if slot == len(self._slots):
                self._slots.append(memory)
            else:
                self._slots[slot] = memory
        data = self._slots[slot]
        _ipc(parts, pa.FixedSizeBufferWriter(pa.py_buffer(data[_HEADER:].numpy())))
        data[0] = 1
        waiting = self.waiting()
        self.peak = max(self.peak, waiting)
        if waiting == len(data) and waiting > self.limit:
            self.alone = max(self.alone, waiting)
        stats = {
            **stats,
            "sent_peak": self.peak,
            "sent_limit": self.limit,
            "sent_alone": self.alone,
        }
        return Steps(first, steps, self.worker, stats, slot, size, memory)


def merge_runs(
    parts: Sequence[Steps],
    slots: dict[tuple[int, int], torch.Tensor],
    schema: pa.Schema | None,
) -> tuple[pa.RecordBatch, list[int]]:
    """The K workers' parts of one run as the rank's rows of its steps, in order,
    and the rows of each step; frees the parts' slots. ``slots`` are the slots
    seen so far (see :meth:`Steps.batches`), ``schema`` the merged batches', if
    known.

    The Go core merges them, copying each value once: pyarrow's ``take``
    copies a list value by value, which costs more than dealing the rows.
    """
    batches = [b for p in parts for b in p.batches(slots)]
    try:
        return _lib.merge_shared(batches, parts[0].steps, schema)
    finally:
        del batches
        for p in parts:
            p.release(slots)
