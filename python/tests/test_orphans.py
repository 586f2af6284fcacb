"""DataLoader workers never outlive their trainer.

A trainer (killable_trainer.py, run as its own program, as a user runs one)
reads wide rows with ``croupier.DataLoader(num_workers=2)``: each run of steps a
worker sends is megabytes, so the pipe to the trainer is full whenever the
trainer is not reading. The test kills the trainer mid-epoch (SIGKILL, SIGTERM,
or ``os._exit``) and checks that every process it had started (its workers and
the multiprocessing resource tracker, found by walking /proc before the kill)
is gone within 30 s: a bound on liveness, not a measure of speed.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch.utils.data
from conftest import uri

import croupier as cr
from croupier.dataloader import _WorkerStart

pytestmark = pytest.mark.slow  # starts trainers that spawn workers importing torch

ROWS, BLOB = 2400, 16 << 10  # 200 steps of 12 rows of 16 KiB: a run of 16 steps is 3 MiB
GONE_WITHIN = 30.0  # seconds

# The trainer: killable_trainer.train over the permutation, reporting steps on
# stdout; SIGUSR1 makes it call os._exit. With "thread" it trains in a thread
# other than the main one, where the workers cannot ask for their parent's
# death signal (it follows the thread that started them).
TRAINER = textwrap.dedent(
    """
    import json, os, signal, sys, threading
    from pathlib import Path

    import killable_trainer

    class Report:
        def send(self, message):
            print(json.dumps(message), flush=True)

    perm, work, where = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    signal.signal(signal.SIGUSR1, lambda signum, frame: os._exit(3))
    def run():
        killable_trainer.train(perm, work, 1, 2, 10**9, Report(), columns=["id", "blob"])
    if where == "thread":
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
    else:
        run()
    """
)


def processes() -> dict[int, tuple[int, str, str]]:
    """Every process now: pid -> (parent pid, state, start time)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(entry)] = (int(fields[1]), fields[0], fields[19])
    return out


def descendants(pid: int) -> dict[int, str]:
    """The processes below ``pid``: pid -> start time (which tells a reused pid apart)."""
    procs = processes()
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, _, started) in procs.items():
            if ppid == parent and child not in found:
                found[child] = started
                todo.append(child)
    return found


def alive(procs: dict[int, str]) -> dict[int, str]:
    """Those of ``procs`` still running (a zombie waiting to be reaped has ended)."""
    now = processes()
    return {
        pid: started
        for pid, started in procs.items()
        if pid in now and now[pid][2] == started and now[pid][1] != "Z"
    }


@pytest.fixture(scope="module")
def wide_perm(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A permutation of a table of ROWS rows, each with a BLOB-byte binary column."""
    folder = tmp_path_factory.mktemp("wide")
    blob = pa.array([bytes(BLOB)] * ROWS, type=pa.binary())
    table = pa.table({"id": pa.array(np.arange(ROWS, dtype=np.int64)), "blob": blob})
    pq.write_table(table, folder / "table.parquet", row_group_size=200)
    with cr.open_table(uri(folder / "table.parquet")) as tbl:
        cr.PermutationBuilder(tbl).persist(uri(folder / "perm"), progress=False).close()
    return uri(folder / "perm")


def start_trainer(perm: str, work: Path, where: str) -> subprocess.Popen[str]:
    tests = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-c", TRAINER, perm, str(work), where],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_for_step(trainer: subprocess.Popen[str], step: int) -> None:
    """Read the trainer's reports until it has logged ``step``."""
    assert trainer.stdout is not None
    for line in trainer.stdout:
        message: list[Any] = json.loads(line)
        if message == ["step", step]:
            return
    pytest.fail(f"the trainer exited with status {trainer.wait()} before step {step}")


@pytest.mark.parametrize(
    ("death", "where"),
    [
        ("SIGKILL", "main"),
        ("SIGTERM", "main"),
        ("os._exit", "main"),
        ("SIGKILL", "thread"),  # no parent death signal: the workers notice alone
    ],
)
def test_workers_never_outlive_their_trainer(
    wide_perm: str, tmp_path: Path, death: str, where: str
) -> None:
    trainer = start_trainer(wide_perm, tmp_path, where)
    children: dict[int, str] = {}
    try:
        wait_for_step(trainer, 40)  # mid-epoch, the workers' runs queued up behind
        children = descendants(trainer.pid)
        assert len(children) >= 2, children  # the two workers (and a resource tracker)
        sig = {"SIGKILL": signal.SIGKILL, "SIGTERM": signal.SIGTERM, "os._exit": signal.SIGUSR1}
        os.kill(trainer.pid, sig[death])
        status = trainer.wait(60)
        assert status == (3 if death == "os._exit" else -sig[death])
        deadline = time.monotonic() + GONE_WITHIN
        while (left := alive(children)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"still running {GONE_WITHIN:g} s after the trainer died: {left}"
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
        for pid in alive(children):  # what a failure left behind
            os.kill(pid, signal.SIGKILL)


class OneBigItem(torch.utils.data.IterableDataset[bytes]):
    """One item far larger than a pipe holds: its worker's feeder thread writes
    it only as the trainer reads."""

    def __iter__(self) -> Iterator[bytes]:
        yield bytes(range(256)) * (32 << 10)  # 8 MiB


def start_worker_loop(done: Any, method: str = "spawn") -> tuple[Any, Any, Any]:
    """torch's worker loop over OneBigItem, started as torch starts it, with
    croupier.DataLoader's worker_init_fn: (process, index queue, data queue)."""
    context = multiprocessing.get_context(method)
    indices, data = context.Queue(), context.Queue()
    worker = context.Process(
        target=torch.utils.data._utils.worker._worker_loop,
        args=(
            torch.utils.data._DatasetKind.Iterable,
            [OneBigItem()],
            indices,
            data,
            done,
            False,  # auto_collation
            torch.utils.data.default_convert,
            False,  # drop_last
            0,  # base_seed
            _WorkerStart(None, os.getpid(), watch="pidfd" if method == "forkserver" else None),
            0,  # worker_id
            1,  # num_workers
            False,  # persistent_workers
            0,  # shared_seed
        ),
        daemon=True,
    )
    worker.start()
    return worker, indices, data


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_finished_worker_delivers_before_it_exits(method: str) -> None:
    """A worker told to exit (its iterator ended) while its last item is still
    on its way waits until the trainer has it: the workers share one lock on
    the pipe, which a worker exiting mid-write would keep from the others. A
    worker forked from a fork server, whose parent is not the trainer, too."""
    done = multiprocessing.get_context(method).Event()  # held: the worker opens it as it starts
    worker, indices, data = start_worker_loop(done, method)
    try:
        for i in range(2):  # the item, then the end of the iterator
            indices.put((i, None))
        indices.put(None)
        worker.join(1.0)  # time to exit, were the item dropped
        got = dict(data.get(timeout=60) for _ in range(2))
        assert got[0] == bytes(range(256)) * (32 << 10)
        assert type(got[1]).__name__ == "_IterableDatasetStopIteration"
        worker.join(60)
        assert worker.exitcode == 0
    finally:
        worker.kill()


def test_a_worker_shut_down_drops_what_it_did_not_deliver() -> None:
    """Once the trainer shuts its workers down (done_event), a worker exits
    without waiting for it to read an item it no longer wants."""
    context = multiprocessing.get_context("spawn")
    done = context.Event()
    worker, indices, data = start_worker_loop(done)
    try:
        indices.put((0, None))
        while worker.is_alive() and data.empty():  # the first bytes of the item are in the pipe
            time.sleep(0.05)
        done.set()
        indices.put(None)
        worker.join(GONE_WITHIN)
        assert worker.exitcode == 0
    finally:
        worker.kill()
