"""A training loop that survives ``kill -9``, as a real trainer would; run by test_crash.py.

:func:`train` deals the global steps of split "all" of a permutation to ``W``
ranks (one StreamingDataset and croupier.DataLoader each, in one process) and,
after every step, appends the step's sample ids to ``steps.jsonl`` and then
durably replaces ``checkpoint.json`` (temporary file, fsync, rename, fsync of
the folder). A kill between the two leaves a step in the log that the
checkpoint does not count: on start the log is cut back to the checkpoint and
that step is dealt (and trained on) again, as a trainer that resumes from its
last checkpoint replays the steps after it.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import croupier as cr

G, S, SEED = 12, 12, 7  # S is divisible by every world size the test uses
TRAIN_SECONDS = 0.03  # a step's "training": the window between the log and the checkpoint


def write_durably(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` so that a crash leaves the old or the new file."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def cut_log(log: Path, steps: int) -> int:
    """Keep the log's entries of steps before ``steps``; returns how many were dropped.

    Entries are written before the checkpoint that counts them, so any entry at
    or after the checkpoint, and a torn last line, belong to steps to replay.
    """
    if not log.exists():
        return 0
    kept, dropped = [], 0
    for line in log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            dropped += 1
            continue
        if entry["step"] < steps:
            kept.append(line)
        else:
            dropped += 1
    write_durably(log, "".join(line + "\n" for line in kept))
    return dropped


def train(
    perm: str,
    work: Path,
    world_size: int,
    workers: int,
    steps: int,
    report: Any,
    columns: Sequence[str] = ("id",),
) -> None:
    """Train from the last checkpoint in ``work`` up to global step ``steps``.

    ``report`` (a multiprocessing Connection) gets ``("resumed", step, dropped)``
    once, then ``("step", t)`` after each step is logged. ``columns`` are read
    (they must include ``id``).
    """
    split = cr.open_permutations(perm)["all"]
    datasets = [
        cr.StreamingDataset(split, global_batch_size=G, num_splits=S, columns=list(columns),
                            shuffle_seed=SEED, rank=r, world_size=world_size, format="numpy")
        for r in range(world_size)
    ]  # fmt: skip
    # Workers come from croupier.DataLoader's default fork server: each watches
    # this process and ends with it, kill -9 included.
    loaders = [cr.DataLoader(ds, num_workers=workers, in_process=False) for ds in datasets]
    checkpoint, log = work / "checkpoint.json", work / "steps.jsonl"
    step = 0
    if checkpoint.exists():
        saved: dict[str, Any] = json.loads(checkpoint.read_text())
        step = saved["global_step"]
        for loader in loaders:
            loader.load_state_dict(saved["data"])
    report.send(("resumed", step, cut_log(log, step)))

    with open(log, "a") as out:
        while step < steps:
            epoch = datasets[0].epoch
            for ds in datasets:
                ds.set_epoch(epoch)  # keeps a resumed position inside the epoch
            for batches in zip(*loaders, strict=True):
                ids = sorted(int(i) for batch in batches for i in batch["id"])
                out.write(json.dumps({"step": step, "epoch": epoch, "ids": ids}) + "\n")
                out.flush()
                os.fsync(out.fileno())
                report.send(("step", step))
                time.sleep(TRAIN_SECONDS)
                step += 1
                states = [loader.state_dict() for loader in loaders]
                assert all(s == states[0] for s in states), states
                write_durably(checkpoint, json.dumps({"global_step": step, "data": states[0]}))
                if step == steps:
                    break
