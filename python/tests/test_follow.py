"""Following a growing croupier table (docs/concepts.md, "Following a growing table").

The main test runs the RL setting end to end with real processes: four
generators append rollouts while a learner of two ranks follows the table,
is killed with SIGKILL, and resumes from its checkpoint at three ranks; the
steps of both runs are those of one uninterrupted run over the versions
committed, reconstructed afterwards.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import rollout_roles as roles
from conftest import uri

import croupier as cr

GENERATORS, VERSIONS = 4, 12  # each generator's versions: about 4 * 12 * 15 rows in all
STEPS, KILL_AFTER = 50, 20  # global steps in all; the first run is killed past this many


def forkserver() -> BaseContext:
    """Processes forked from a server that imported torch and croupier."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "croupier.follow", "rollout_roles"])
    return ctx


def logged(folder: Path) -> int:
    """The whole steps a learner rank wrote."""
    return len(list(folder.glob("*.json"))) if folder.exists() else 0


def read_steps(folders: list[Path], first: int, last: int) -> dict[int, list[dict[str, Any]]]:
    """Steps [first, last) of each rank, rank by rank."""
    return {
        t: [json.loads((f / f"{t:05d}.json").read_text()) for f in folders]
        for t in range(first, last)
    }


def uninterrupted(table_uri: str, steps: int) -> tuple[list[list[int]], list[dict[str, Any]]]:
    """The sorted ids of each global step of one rank following the finished table, and
    the round of each step."""
    ds = roles.dataset(table_uri, 0, 1)
    ids, rounds = [], []
    for batch in ds:
        ids.append(sorted(batch["id"].tolist()))
        rounds.append(ds.last_round)
        if len(ids) == steps:
            break
    assert len(ids) == steps, ds.stats()
    return ids, rounds


@pytest.mark.slow
def test_learner_killed_and_resumed_at_another_world_size_while_generators_append(
    tmp_path: Path,
) -> None:
    table_uri = uri(tmp_path / "rollouts")
    cr.create_table(table_uri, roles.rows(list(range(-20, 0)), -1), row_group_rows=16)
    ctx = forkserver()
    gens = [
        ctx.Process(  # type: ignore[attr-defined]
            target=roles.generate, args=(table_uri, g, VERSIONS, str(tmp_path / f"gen{g}.json"))
        )
        for g in range(GENERATORS)
    ]
    first = [tmp_path / "run1" / f"rank{r}" for r in range(2)]
    second = [tmp_path / "run2" / f"rank{r}" for r in range(3)]
    learners = [
        ctx.Process(  # type: ignore[attr-defined]
            target=roles.learn, args=(table_uri, str(first[r]), r, 2, STEPS, None)
        )
        for r in range(2)
    ]
    procs = gens + learners
    for p in procs:
        p.start()
    try:
        deadline = time.monotonic() + 120
        while min(logged(f) for f in first) < KILL_AFTER:
            assert time.monotonic() < deadline, [p.exitcode for p in learners]
            time.sleep(0.005)
        for p in learners:
            os.kill(p.pid, signal.SIGKILL)
        for p in learners:
            p.join(30)
            assert p.exitcode == -signal.SIGKILL, "the learner finished before it was killed"
        # Both ranks checkpoint the same state after each step: resume from the
        # last step both finished, at three ranks.
        done = min(logged(f) for f in first)
        states = [json.loads((f / f"{done - 1:05d}.json").read_text())["state"] for f in first]
        assert states[0] == states[1]
        state = tmp_path / "state.json"
        state.write_text(json.dumps(states[0]))
        resumed = [
            ctx.Process(  # type: ignore[attr-defined]
                target=roles.learn, args=(table_uri, str(second[r]), r, 3, STEPS, str(state))
            )
            for r in range(3)
        ]
        procs += resumed
        for p in resumed:
            p.start()
        for p in procs:
            p.join(120)
            assert p.exitcode in (0, -signal.SIGKILL), p.exitcode
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()

    steps = {**read_steps(first, 0, done), **read_steps(second, done, STEPS)}
    want, rounds = uninterrupted(table_uri, STEPS)
    got = [sorted(i for rank in steps[t] for i in rank["ids"]) for t in range(STEPS)]
    assert got == want
    assert [steps[t][0]["round"] for t in range(STEPS)] == [r["round"] for r in rounds]

    # Each row's _version is the version whose append wrote it.
    version_of = dict.fromkeys(range(-20, 0), 1)
    for g in range(GENERATORS):
        for version, start, n in json.loads((tmp_path / f"gen{g}.json").read_text()):
            version_of.update(dict.fromkeys(range(start, start + n), version))
    for t in range(STEPS):
        for rank in steps[t]:
            assert rank["versions"] == [version_of[i] for i in rank["ids"]]

    # No row twice within a round; every row of the versions of the rounds
    # dealt whole is dealt, or carried into the round after them.
    by_round: dict[int, list[int]] = {}
    for t in range(STEPS):
        by_round.setdefault(rounds[t]["round"], []).extend(got[t])
    for r, ids in by_round.items():
        assert len(ids) == len(set(ids)), f"round {r} deals a row twice"
    whole = [r for r in rounds if r["step"] + r["steps"] <= STEPS]
    last = whole[-1]
    dealt = {i for r in by_round if r <= last["round"] for i in by_round[r]}
    upto = {i for i, v in version_of.items() if v <= last["version"]}
    carried = cr.open_table(table_uri).take(last["next"]["carry"], ["id"])["id"].to_pylist()
    # The carry holds row ids of the table; a replayed row may be carried too.
    assert set(carried) <= upto
    assert upto - dealt == set(carried) - dealt
    assert any(r["replayed_rows"] for r in whole)


@pytest.fixture
def growing(tmp_path: Path) -> str:
    """A croupier table of five versions of 30 rows, ids 0 to 149."""
    table_uri = uri(tmp_path / "t")
    table = cr.create_table(table_uri, roles.rows(list(range(30)), 0))
    for v in range(1, 5):
        table.append(roles.rows(list(range(30 * v, 30 * (v + 1))), 0))
    return table_uri


def follow(table_uri: str, **options: Any) -> Any:
    follow = cr.Follow(wait_timeout=0.01, poll_interval=0.001, **options)
    return cr.FollowingDataset(
        table_uri, follow, global_batch_size=8, columns=["id"], format="numpy"
    )


def test_rounds_of_one_version_each_deal_every_row_once(growing: str) -> None:
    ds = follow(growing)
    ids = [i for batch in ds for i in batch["id"].tolist()]
    stats = ds.stats()
    assert stats["waited_out"]
    assert (stats["rounds"], stats["replayed_rows"]) == (5, 0)
    # 150 rows in steps of 8: 144 dealt, the last 6 carried into a round that never forms
    assert len(ids) == len(set(ids)) == 144
    assert set(range(150)) - set(ids) == set(ds.last_round["next"]["carry"])


def test_staleness_skips_and_counts_old_versions(growing: str) -> None:
    ds = follow(growing, rows_per_round=150, max_versions_behind=1)
    ids = np.concatenate([batch["id"] for batch in ds])
    assert set(ids.tolist()) <= set(range(90, 150))
    assert (ds.stats()["skipped_versions"], ds.stats()["skipped_rows"]) == (3, 90)


def test_state_dict_refuses_other_rules(growing: str) -> None:
    state = follow(growing, rows_per_round=20).state_dict()
    with pytest.raises(cr.InvalidArgumentError, match="state dict follow"):
        follow(growing, rows_per_round=30).load_state_dict(state)
    with pytest.raises(cr.InvalidArgumentError, match="kind"):
        follow(growing).load_state_dict({**state, "kind": None})


def test_bad_options_are_named(growing: str, tmp_path: Path) -> None:
    with pytest.raises(cr.InvalidArgumentError, match="replay"):
        follow(growing, replay="half")
    with pytest.raises(cr.InvalidArgumentError, match="max_versions_behind"):
        follow(growing, max_versions_behind=-1)
    with pytest.raises(cr.InvalidArgumentError, match="replay"):
        follow(growing, replay=-0.5)
    table_uri = uri(tmp_path / "v")
    cr.create_table(table_uri, pa.table({"_version": [1, 2]}))
    with pytest.raises(cr.InvalidArgumentError, match="_version"):
        cr.FollowingDataset(table_uri, cr.Follow(), global_batch_size=2)


def test_refuses_dataloader_workers(growing: str) -> None:
    import torch.utils.data

    loader = torch.utils.data.DataLoader(follow(growing), batch_size=None, num_workers=1)
    with pytest.raises(cr.InvalidArgumentError, match="num_workers=0"):
        next(iter(loader))


CHILD = """
import sys
import croupier as cr
follow = cr.Follow(wait_timeout=None, poll_interval=0.01)
ds = cr.FollowingDataset(sys.argv[1], follow, global_batch_size=8, columns=["id"], format="numpy")
batches = iter(ds)
for _ in range(18):  # the steps of the five rounds there are
    next(batches)
try:
    print("ready", flush=True)
    next(batches)  # waits for a version that never lands
except KeyboardInterrupt:
    print("interrupted after", ds.steps_consumed, "steps", flush=True)
"""


@pytest.mark.slow
def test_ctrl_c_stops_a_wait_without_limit(growing: str) -> None:
    """A follower waiting without limit for a round that never completes stops at Ctrl-C."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, growing], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGINT)
        out, _ = child.communicate(timeout=20)
    finally:
        child.kill()
    assert out.strip() == "interrupted after 18 steps"


def test_groups_are_dealt_whole(tmp_path: Path) -> None:
    """With group_by, the rows of a prompt appended together reach one step and one rank."""
    table_uri = uri(tmp_path / "g")

    def prompts(ids: list[int]) -> pa.Table:  # four samples a prompt
        return pa.table({"id": ids, "prompt": [i // 4 for i in ids]})

    table = cr.create_table(table_uri, prompts(list(range(0, 24))))
    for v in range(1, 6):
        table.append(prompts(list(range(24 * v, 24 * (v + 1)))))
    follow = cr.Follow(group_by="prompt", rows_per_round=40, replay=2, wait_timeout=0.01)
    steps: dict[int, list[list[int]]] = {}
    for rank in range(2):
        ds = cr.FollowingDataset(table_uri, follow, global_batch_size=8, num_splits=2, rank=rank,
                                 world_size=2, columns=["id"], format="numpy")  # fmt: skip
        for batch in ds:
            steps.setdefault(ds.steps_consumed - 1, []).append(batch["id"].tolist())
        assert ds.stats()["replayed_rows"] > 0
    assert len(steps) > 5
    for t, ranks in steps.items():
        for rank in ranks:  # each rank's rows hold whole prompts of 4 rows
            assert sorted(rank) == sorted({i // 4 * 4 + k for i in rank for k in range(4)}), (
                t,
                rank,
            )
        assert not {i // 4 for i in ranks[0]} & {i // 4 for i in ranks[1]}
