"""The processes of test_follow.py: rollout generators appending to a croupier
table, and the ranks of a learner following it.

A generator appends versions of seeded random sizes, each row's id naming the
generator and its place (``gen * 1_000_000 + n``), and records which version
each append became. A learner rank follows the table with :data:`FOLLOW` and,
after every global step, writes the step's ids, their ``_version`` values,
its round and the dataset's state dict to ``<out>/<step>.json`` (written
whole, then renamed): a rank killed at any moment leaves whole steps only.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import croupier as cr

G, S, SEED = 12, 12, 5  # S is divisible by the world sizes 2 and 3
FOLLOW = {"rows_per_round": 40, "replay": 0.25, "wait_timeout": 20.0, "poll_interval": 0.01}
TRAIN_SECONDS = 0.02  # a step's "training"


def rows(ids: list[int], gen: int) -> pa.Table:
    """Rollouts with ids ``ids`` of generator ``gen``."""
    a = np.array(ids, dtype=np.int64)
    return pa.table({"id": a, "gen": pa.array([gen] * len(ids), pa.int32()), "reward": a % 7 * 0.5})


def generate(uri: str, gen: int, versions: int, out: str) -> None:
    """Append ``versions`` versions of 1 to 30 rows; write [version, first id, rows] of each."""
    rng = random.Random(gen)
    made, n = [], 0
    table = cr.open_table(uri)  # appends commit on the latest version, whatever it pins
    for _ in range(versions):
        size = rng.randint(1, 30)
        ids = list(range(gen * 1_000_000 + n, gen * 1_000_000 + n + size))
        version = table.append(rows(ids, gen), row_group_rows=16)
        made.append([version, ids[0], size])
        n += size
        time.sleep(rng.uniform(0, 0.03))
    Path(out).write_text(json.dumps(made))


def dataset(uri: str, rank: int, world: int) -> Any:
    """A learner rank's dataset."""
    return cr.FollowingDataset(uri, cr.Follow(**FOLLOW), global_batch_size=G, num_splits=S,  # type: ignore[arg-type]
                               columns=["id"], shuffle_seed=SEED, rank=rank, world_size=world,
                               format="numpy")  # fmt: skip


def learn(uri: str, out: str, rank: int, world: int, steps: int, state: str | None) -> None:
    """Follow until global step ``steps``, from the state dict in file ``state`` if given."""
    ds = dataset(uri, rank, world)
    if state is not None:
        ds.load_state_dict(json.loads(Path(state).read_text()))
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    for batch in ds:
        step = ds.steps_consumed - 1
        time.sleep(TRAIN_SECONDS)
        record = {
            "ids": batch["id"].tolist(),
            "versions": batch["_version"].tolist(),
            "round": ds.last_round["round"],
            "state": ds.state_dict(),
        }
        tmp = folder / f"{step:05d}.tmp"
        tmp.write_text(json.dumps(record))
        os.replace(tmp, folder / f"{step:05d}.json")
        if ds.steps_consumed == steps:
            return
