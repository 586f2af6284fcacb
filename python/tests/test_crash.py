"""A training process killed with SIGKILL, again and again, loses and repeats no sample.

killable_trainer.py checkpoints after every step (durably) and logs each step's
sample ids. The test kills it at seeded random steps and moments, resumes it
from its last checkpoint at another world size and number of DataLoader
workers each time, across an epoch boundary, and compares the log with an
uninterrupted run. Each run is a process forked from a fork server that has
imported torch (starting in a fraction of a second); the DataLoader workers of
a run come from the run's own fork server, which imports torch again, so the
test is marked ``slow``.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import random
import signal
import time
from collections import Counter
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

import killable_trainer as trainer
import pytest
from conftest import WriteTable

import croupier as cr

ROWS = 150  # S = 12 streams of 12 rows: 12 steps per epoch, 6 rows left out each epoch
SEED = 20240607
# (world size, workers) of each run; every run but the last is killed
RUNS = [(1, 0), (2, 0), (1, 2), (3, 0), (1, 1), (4, 0), (2, 0)]


def uninterrupted(split: cr.Permutation, steps: int) -> list[list[int]]:
    """The sorted ids of each global step of a run that is never stopped."""
    ds = cr.StreamingDataset(split, global_batch_size=trainer.G, num_splits=trainer.S,
                             columns=["id"], shuffle_seed=trainer.SEED, format="numpy")  # fmt: skip
    out: list[list[int]] = []
    while len(out) < steps:
        for batch in ds:  # each iteration continues with the next epoch
            out.append(sorted(int(i) for i in batch["id"]))
            if len(out) == steps:
                break
    return out


def forkserver() -> BaseContext:
    """Processes forked from a server that imported torch, croupier and the trainer,
    but has not loaded the Go core: each run starts in a fraction of a second
    instead of importing torch again, and loads the Go core after the fork."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "croupier.dataset", "killable_trainer"])
    return ctx


def start(ctx: BaseContext, perm: str, work: Path, run: int, steps: int) -> tuple[Any, Any]:
    """Start run ``run``; returns the process and the end of the pipe it reports to."""
    world_size, workers = RUNS[run]
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(  # type: ignore[attr-defined]
        target=trainer.train, args=(perm, work, world_size, workers, steps, send)
    )
    proc.start()
    send.close()
    return proc, receive


def report(proc: Any, receive: Any, run: int) -> tuple[Any, ...]:
    """The next message of the run; fails if it ended or went silent for a minute."""
    if receive.poll(60):
        try:
            return tuple(receive.recv())
        except EOFError:
            pass
    proc.join(5)
    pytest.fail(f"run {run} {RUNS[run]} stopped reporting (exit code {proc.exitcode})")


@pytest.mark.slow
def test_sigkill_at_random_steps(tmp_path: Path, write_table: WriteTable) -> None:
    tbl = cr.open_table(write_table("table", [90, 60]))
    perm = "file://" + str(tmp_path / "perm")
    split = cr.PermutationBuilder(tbl).shuffle(seed=3).persist(perm, progress=False)["all"]
    steps_per_epoch = ROWS // trainer.S * trainer.S // trainer.G
    steps = 2 * steps_per_epoch + 3  # into a third epoch
    work = tmp_path / "work"
    work.mkdir()

    ctx = forkserver()
    rng = random.Random(SEED)
    resumed_at, dropped = [], []
    for run in range(len(RUNS)):
        proc, receive = start(ctx, perm, work, run, steps)
        try:
            _, at, n = report(proc, receive, run)
            resumed_at.append(at)
            dropped.append(n)
            if run == len(RUNS) - 1:
                proc.join(120)
                assert proc.exitcode == 0
                break
            # kill once the run has logged a step 1 to 4 steps past its start, at
            # once (between the log and the checkpoint) or a little later
            target = min(at + rng.randint(1, 4), steps - 2 * (len(RUNS) - run))
            assert target > at, resumed_at
            while report(proc, receive, run) != ("step", target):
                pass
            time.sleep(rng.choice([0.0, rng.uniform(0, 2 * trainer.TRAIN_SECONDS)]))
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(60)
            assert proc.exitcode == -signal.SIGKILL
        finally:
            if proc.is_alive():
                proc.kill()
                proc.join()
            receive.close()

    context = f"seed {SEED}: runs {RUNS} resumed at steps {resumed_at}, dropping {dropped}"
    assert resumed_at[0] == 0
    assert all(b > a for a, b in itertools.pairwise(resumed_at)), context
    # some kill fell between a step's log entry and its checkpoint: that step was replayed
    assert any(dropped), context

    log = [json.loads(line) for line in (work / "steps.jsonl").read_text().splitlines()]
    assert [entry["step"] for entry in log] == list(range(steps)), context
    assert [entry["ids"] for entry in log] == uninterrupted(split, steps), context
    assert [entry["epoch"] for entry in log] == [t // steps_per_epoch for t in range(steps)]
    for epoch in range(3):  # no sample twice in an epoch
        counts = Counter(i for entry in log if entry["epoch"] == epoch for i in entry["ids"])
        assert set(counts.values()) == {1}, (epoch, context)
    checkpoint = json.loads((work / "checkpoint.json").read_text())
    assert checkpoint["global_step"] == steps
    assert (checkpoint["data"]["epoch"], checkpoint["data"]["steps_consumed"]) == (2, 3)
