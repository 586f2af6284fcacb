"""One measurement loop for every reader, the engine-independent counters it
reads: bytes read from ``/proc/<pid>/io`` or from the S3 server, resident
memory of a process tree from ``/proc/<pid>/status``, and a start line for
reader processes that must start together (the ranks of a cluster).

Bytes read from local files are ``rchar`` of ``/proc/self/io``: every byte
``read()``/``pread()`` returned to the process, whichever library asked, page
cache hits included (files read through ``mmap`` are not counted). The kernel
adds a child's counters to its parent's when the parent reaps it, so after
spawned DataLoader workers have been joined they are in the parent's figure,
and what each read while it started (imports) is taken off; a worker forked
from a fork server is reaped by the server, so what it read after it started
is added. :func:`record_worker_start` notes both. Nothing is taken off for the
measuring process: it has done its imports before it starts counting. Over S3
the figure is the response body bytes the server sent (``internal/s3serve``).
"""

from __future__ import annotations

import gc
import json
import multiprocessing.util
import os
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

# Folder where each DataLoader worker writes what it had read when it started.
WORKER_IO_ENV = "CROUPIER_BENCH_WORKER_IO"


def rchar(pid: int | str = "self") -> int:
    """Bytes the process (and its reaped children) got from read system calls."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/{pid}/io has no rchar")


def record_worker_start(_worker_id: int) -> None:
    """A DataLoader ``worker_init_fn``: note what this worker's reads change in
    the measuring process's count (see the module doc)."""
    folder = os.environ.get(WORKER_IO_ENV)
    if not folder:
        return
    start, trainer = rchar(), multiprocessing.parent_process()
    note = Path(folder, str(os.getpid()))
    if trainer is not None and os.getppid() == trainer.pid:
        note.write_text(str(-start))  # reaped by the trainer: take its start-up off
        return

    def add_what_was_read() -> None:
        note.write_text(str(rchar() - start))

    # Runs as the worker process exits, after torch's worker loop has returned.
    multiprocessing.util.Finalize(None, add_what_was_read, exitpriority=0)


def worker_bytes() -> int:
    """What the workers noted by :func:`record_worker_start` change in the
    measuring process's count; clears the notes."""
    folder = os.environ.get(WORKER_IO_ENV)
    if not folder:
        return 0
    total = 0
    for p in Path(folder).iterdir():
        total += int(p.read_text())
        p.unlink()
    return total


def local_bytes_read() -> int:
    """Bytes read from files by this process and its DataLoader workers, less
    the workers' start-up."""
    return rchar() + worker_bytes()


def server_stats(control: str) -> dict[str, int]:
    """The counters of the S3 server with control URL ``control`` since it
    started or was reset: ``requests``, ``gets``, ``bytes`` (response bodies
    sent), ``peak_in_flight``, and its ``delay_ms``."""
    with urllib.request.urlopen(control + "/stats") as r:
        return {k: int(v) for k, v in json.load(r).items()}


def server_bytes_read(control: str) -> Callable[[], int]:
    """A counter of the body bytes the S3 server with control URL ``control`` has sent."""
    return lambda: server_stats(control)["bytes"]


def _post(url: str) -> None:
    urllib.request.urlopen(urllib.request.Request(url, method="POST")).close()


def set_server_delay(control: str, ms: float) -> None:
    """Set the first-byte delay of the S3 server with control URL ``control``."""
    _post(f"{control}/delay?ms={ms}")


def reset_server(control: str) -> None:
    """Zero the counters of the S3 server with control URL ``control``."""
    _post(f"{control}/reset")


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            out += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return out


def _status_bytes(pid: int | str, field: str) -> int:
    """A size field (``VmRSS``, ``VmHWM``) of ``/proc/<pid>/status`` in bytes; 0 if gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_rss(pid: int, field: str = "VmRSS") -> int:
    """Resident bytes of a process and all its descendants (summed VmRSS, or
    another field of their status: ``RssFile`` is the part that maps files,
    the libraries' code among them)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += _status_bytes(p, field)
        todo += _children(p)
    return total


def peak_rss() -> int:
    """The most resident bytes this process has held (VmHWM), which a parent
    sampling :func:`tree_rss` can miss between two samples."""
    return _status_bytes("self", "VmHWM")


def rss() -> int:
    """The resident bytes of this process now (VmRSS)."""
    return _status_bytes("self", "VmRSS")


def reset_peak_rss() -> None:
    """Start :func:`peak_rss` over from the resident bytes now (Linux 4.0 on)."""
    Path("/proc/self/clear_refs").write_text("5")


def await_start(folder: str, name: str) -> None:
    """In one of several reader processes: say ``name`` is ready, then wait until
    :func:`give_start` lets them all start together."""
    Path(folder, f"ready-{name}").touch()
    while not Path(folder, "go").exists():
        time.sleep(0.01)


def ready_count(folder: str) -> int:
    """How many reader processes wait in :func:`await_start` on ``folder``."""
    return sum(1 for _ in Path(folder).glob("ready-*"))


def give_start(folder: str) -> None:
    """Let every reader process waiting in :func:`await_start` on ``folder`` start."""
    Path(folder, "go").touch()


@dataclass
class Measurement:
    """What one pass of a reader delivered."""

    samples: int = 0
    batches: int = 0
    started: float = 0.0  # perf_counter() at make(): CLOCK_MONOTONIC, one clock for all processes
    seconds: float = 0.0  # from the first batch to the last
    first_batch_s: float = 0.0  # from building the reader to its first batch
    samples_per_s: float = 0.0  # from make() to the last batch
    after_first_per_s: float = 0.0  # from the first batch to the last, its samples left out
    delivered_bytes: int = 0  # Arrow bytes of the projected columns delivered
    read_bytes: int = 0  # bytes read from files or the object store, start-up included
    position_corr: float = 0.0  # Pearson correlation of position in the pass and row id
    row_groups_per_batch: float = 0.0  # distinct row groups of the source a batch holds
    complete: bool = True  # the whole epoch was read (else stopped at the time or batch limit)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def measure(
    make: Callable[[], Iterable[dict[str, Any]]],
    *,
    row_bytes: np.ndarray,
    row_group_rows: int,
    bytes_read: Callable[[], int],
    seconds: float,
    batches: int | None = None,
    on_first: Callable[[float], None] | None = None,
) -> tuple[Measurement, list[np.ndarray]]:
    """Build a reader with ``make`` and consume its batches for up to ``seconds``
    after the first, and no more than ``batches`` of them if given;
    ``on_first`` gets the seconds to the first batch as soon as it comes.

    Every batch is a dict holding an ``id`` tensor of the source row ids. The
    time to the first batch includes ``make()`` (opening the data, starting
    workers). Throughput counts every batch over the whole time from ``make()``
    to the last batch: work a reader does before its first batch (decoding all
    it will need, loading the table into memory, starting workers) is part of
    the price of an epoch, and counting only the batches after the first would
    reward it. Returns the figures and the row ids of each batch.
    """
    before = bytes_read()
    start = time.perf_counter()
    ids: list[np.ndarray] = []
    first = last = start
    complete = True
    it: Iterator[dict[str, Any]] = iter(make())
    for batch in it:
        last = time.perf_counter()
        if not ids:
            first = last
            if on_first is not None:
                on_first(first - start)
        ids.append(np.asarray(batch["id"]).astype(np.int64, copy=True))
        del batch
        if last - first > seconds or len(ids) == batches:
            complete = False
            break
    del it  # stops and joins the workers, if any, before the bytes are counted
    gc.collect()
    read = bytes_read() - before
    m = Measurement(batches=len(ids), started=start, complete=complete)
    if not ids:
        return m, ids
    order = np.concatenate(ids)
    m.samples = len(order)
    m.first_batch_s = first - start
    m.seconds = last - first
    if last > start:
        m.samples_per_s = m.samples / (last - start)
    if last > first:
        m.after_first_per_s = (m.samples - len(ids[0])) / (last - first)
    m.delivered_bytes = int(row_bytes[order].sum())
    m.read_bytes = read
    if len(order) > 1:
        m.position_corr = float(np.corrcoef(np.arange(len(order)), order)[0, 1])
    m.row_groups_per_batch = float(np.mean([len(np.unique(b // row_group_rows)) for b in ids]))
    return m, ids


def first_batch(make: Callable[[], Iterable[dict[str, Any]]]) -> tuple[float, np.ndarray]:
    """Seconds from building a reader with ``make`` to its first batch, and its row ids."""
    start = time.perf_counter()
    batches = iter(make())
    batch = next(batches)
    seconds = time.perf_counter() - start
    ids = np.asarray(batch["id"]).astype(np.int64, copy=True)
    del batch, batches
    gc.collect()
    return seconds, ids
