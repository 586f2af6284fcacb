"""Following a growing croupier table (docs/concepts.md, "Following a growing table").

The main test runs the RL setting end to end with real processes: four
generators append rollouts while a learner of two ranks follows the table,
is killed with SIGKILL, and resumes from its checkpoint at three ranks; the
steps of both runs are those of one uninterrupted run over the versions
committed, reconstructed afterwards.
"""

from __future__ import annotations

import functools
import itertools
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import rollout_roles as roles
import torch.utils.data
from conftest import uri

import croupier as cr
from croupier import _native

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


@pytest.fixture
def prompted(tmp_path: Path) -> str:
    """A croupier table of six versions of 24 rows, ids 0 to 143, four samples a prompt."""
    table_uri = uri(tmp_path / "g")

    def prompts(ids: list[int]) -> pa.Table:
        return pa.table({"id": ids, "prompt": [i // 4 for i in ids]})

    table = cr.create_table(table_uri, prompts(list(range(0, 24))))
    for v in range(1, 6):
        table.append(prompts(list(range(24 * v, 24 * (v + 1)))))
    return table_uri


def follow(table_uri: str, memory_budget: int | None = None, **options: Any) -> Any:
    follow = cr.Follow(**{"wait_timeout": 0.01, "poll_interval": 0.001, **options})
    return cr.FollowingDataset(table_uri, follow, global_batch_size=8, columns=["id"],
                               format="numpy", memory_budget=memory_budget)  # fmt: skip


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


def test_a_slow_learner_stays_within_versions_of_the_newest(growing: str) -> None:
    """Three versions land after each of the first two rounds, faster than the
    learner: with max_versions_behind_newest=1 every row it is dealt is at most one
    version behind the newest, each round skipping ahead; a state dict taken within a
    round holds the round's newest version and resumes at another world size."""
    table = cr.open_table(growing)
    landings = [list(range(150, 240)), list(range(240, 330))]
    ds = follow(growing, max_versions_behind_newest=1)
    steps, states = [], []
    for batch in ds:
        latest = max(table.versions())
        assert min(batch["_version"].tolist()) >= latest - 1
        steps.append(sorted(batch["id"].tolist()))
        states.append(ds.state_dict())
        last = ds.last_round
        if landings and ds.steps_consumed == last["step"] + last["steps"]:
            ids = landings.pop(0)
            for v in range(3):
                table.append(roles.rows(ids[30 * v : 30 * (v + 1)], 0))
    # Round 0, decided at version 5, deals version 4 and skips 1 to 3; rounds 1 and 2,
    # decided at 8 and 11, deal 7 and 10 and skip the 6 rows carried and two versions;
    # round 3 deals the 6 rows carried and version 11.
    assert len(steps) == 13
    assert (ds.stats()["skipped_rows"], ds.stats()["skipped_versions"]) == (222, 7)
    assert [states[t]["position"].get("newest") for t in (0, 2, 3)] == [5, None, 8]
    assert ds.last_round is not None
    assert (ds.last_round["round"], ds.last_round["newest"]) == (3, 11)
    resumed = cr.FollowingDataset(
        growing,
        cr.Follow(max_versions_behind_newest=1, wait_timeout=0.01, poll_interval=0.001),
        global_batch_size=8, columns=["id"], format="numpy", rank=1, world_size=2,
    )  # fmt: skip
    resumed.load_state_dict(json.loads(json.dumps(states[3])))
    again = [sorted(batch["id"].tolist()) for batch in resumed]
    assert len(again) == len(steps) - 4
    assert all(set(mine) <= set(all_) for mine, all_ in zip(again, steps[4:], strict=True))


def test_state_dict_refuses_other_rules(growing: str) -> None:
    state = follow(growing, rows_per_round=20).state_dict()
    with pytest.raises(cr.InvalidArgumentError, match=r"follow\.rows_per_round is 20"):
        follow(growing, rows_per_round=30).load_state_dict(state)
    with pytest.raises(cr.InvalidArgumentError, match="kind"):
        follow(growing).load_state_dict({**state, "kind": None})


def test_bad_options_are_named(growing: str, tmp_path: Path) -> None:
    with pytest.raises(cr.InvalidArgumentError, match="replay"):
        follow(growing, replay="half")
    with pytest.raises(cr.InvalidArgumentError, match="max_versions_behind"):
        follow(growing, max_versions_behind=-1)
    with pytest.raises(cr.InvalidArgumentError, match="max_versions_behind_newest"):
        follow(growing, max_versions_behind_newest=-1)
    with pytest.raises(cr.InvalidArgumentError, match="run"):
        follow(growing, run="alone")
    with pytest.raises(cr.InvalidArgumentError, match="replay"):
        follow(growing, replay=-0.5)
    table_uri = uri(tmp_path / "v")
    cr.create_table(table_uri, pa.table({"_version": [1, 2]}))
    with pytest.raises(cr.InvalidArgumentError, match="_version"):
        cr.FollowingDataset(table_uri, cr.Follow(), global_batch_size=2)


def test_refuses_torch_dataloader_workers(growing: str) -> None:
    """torch's DataLoader cannot hand the workers' steps over in order, nor keep
    the position: its workers refuse, naming croupier.DataLoader."""
    loader = torch.utils.data.DataLoader(follow(growing), batch_size=None, num_workers=1)
    with pytest.raises(cr.InvalidArgumentError, match=r"needs croupier\.DataLoader"):
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


def test_groups_are_dealt_whole(prompted: str) -> None:
    """With group_by, the rows of a prompt appended together reach one step and one rank."""
    follow = cr.Follow(group_by="prompt", rows_per_round=40, replay=2, wait_timeout=0.01)
    steps: dict[int, list[list[int]]] = {}
    for rank in range(2):
        ds = cr.FollowingDataset(prompted, follow, global_batch_size=8, num_splits=2, rank=rank,
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


# -- croupier.DataLoader with worker processes ------------------------------------------

ROUNDS = {"rows_per_round": 16, "replay": 0.25}


def deliver(ds: Any, workers: int, **loader_args: Any) -> Iterator[dict[str, Any]]:
    """What the training loop sees of each step of iterating ``ds`` under
    croupier.DataLoader: the step, its ids and versions, the dataset's round and
    the loader's state dict after it."""
    loader = cr.DataLoader(ds, num_workers=workers, in_process=False, **loader_args)
    for batch in loader:
        yield {"step": ds.steps_consumed - 1, "ids": batch["id"].tolist(),
               "versions": batch["_version"].tolist(), "round": ds.last_round,
               "state": loader.state_dict()}  # fmt: skip


def delivered(
    ds: Any, workers: int, limit: int | None = None, **loader_args: Any
) -> list[dict[str, Any]]:
    """The steps :func:`deliver` gives, the first ``limit`` if given (the loop
    breaks after them)."""
    return list(itertools.islice(deliver(ds, workers, **loader_args), limit))


@pytest.mark.parametrize(("workers", "grouped"), [(2, False), (3, True)])
def test_dataloader_workers_deal_the_steps_of_one_process(
    growing: str, prompted: str, workers: int, grouped: bool
) -> None:
    """Under croupier.DataLoader with workers, each forming the rounds itself, the
    training loop gets the steps of num_workers=0, in order, with each step's
    round and the state dict after it; stats() adds up the workers' counters."""
    table, options = (prompted, {"group_by": "prompt", **ROUNDS}) if grouped else (growing, ROUNDS)
    one = follow(table, **options)
    want = delivered(one, 0)
    assert [s["step"] for s in want] == list(range(len(want)))
    assert len({s["round"]["round"] for s in want}) > 2
    ds = follow(table, **options)
    assert delivered(ds, workers) == want
    assert ds.state_dict() == one.state_dict()
    assert ds.last_round == one.last_round
    mine, theirs = ds.stats(), one.stats()
    for key in ("steps", "rows", "rounds", "version", "new_rows", "replayed_rows", "waited_out"):
        assert mine[key] == theirs[key], key
    assert mine["waited_out"]
    # The next iteration goes on from the position: no version completes a round.
    assert delivered(ds, 0) == []
    assert ds.steps_consumed == len(want)


def test_workers_asked_for_read_in_process(growing: str) -> None:
    """A following dataset without a collate is read in the training process
    whatever num_workers asks, with the steps of no workers."""
    want = delivered(follow(growing, **ROUNDS), 0)
    loader = cr.DataLoader(follow(growing, **ROUNDS), num_workers=2)
    assert loader.num_workers == 0
    assert [b["id"].tolist() for b in loader] == [s["ids"] for s in want]


def test_dataloader_workers_resume_from_a_state_dict(growing: str) -> None:
    """Stopped after some steps under 2 workers, a checkpoint resumes under 3 in a
    fresh dataset with exactly the steps of an uninterrupted run."""
    want = delivered(follow(growing, **ROUNDS), 0)
    first = delivered(follow(growing, **ROUNDS), 2, limit=7)
    ds = follow(growing, **ROUNDS)
    cr.DataLoader(ds).load_state_dict(json.loads(json.dumps(first[-1]["state"])))
    assert ds.steps_consumed == 7
    assert first + delivered(ds, 3) == want


def test_dataloader_workers_follow_while_versions_land(tmp_path: Path) -> None:
    """While versions land, each worker waits for the rounds it deals on its own,
    and may time out at another round than the others: what the training loop
    gets is a prefix, step by step, of following the finished table, and at least
    the steps of the versions committed before it started."""
    table_uri = uri(tmp_path / "t")
    table = cr.create_table(table_uri, roles.rows(list(range(30)), 0))
    table.append(roles.rows(list(range(30, 60)), 0))
    before = len(delivered(follow(table_uri, **ROUNDS), 0))

    def append() -> None:
        for v in range(2, 12):
            table.append(roles.rows(list(range(30 * v, 30 * (v + 1))), 0))
            time.sleep(0.01)

    appender = threading.Thread(target=append)
    got = []
    for step in deliver(follow(table_uri, wait_timeout=1.0, **ROUNDS), 2):
        got.append(step)
        if len(got) == 1:  # the workers are following now
            appender.start()
    appender.join()
    want = delivered(follow(table_uri, **ROUNDS), 0)
    assert len(want) > before
    assert len(got) >= before
    assert got == want[: len(got)]


STOP_CHILD = """
import sys, threading
import croupier as cr
from croupier import _native
follow = cr.Follow(wait_timeout=None, poll_interval=0.001)
ds = cr.FollowingDataset(sys.argv[1], follow, global_batch_size=8, columns=["id"], format="numpy")
stop = threading.Event()
_native.stop_waiting_when(stop.is_set)
steps = 0
try:
    for batch in ds:
        steps += 1
        stop.set()
except _native.StopWaiting:
    print("stopped", steps <= 18, flush=True)
ds.close()
"""


def test_a_wait_in_go_ends_when_told_to_stop(growing: str) -> None:
    """A follower waiting without limit for versions that never land stops, its
    call into Go canceled, once the condition of stop_waiting_when holds (what
    a DataLoader worker's done_event does when the loop leaves the loader)."""
    child = subprocess.run([sys.executable, "-c", STOP_CHILD, growing],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert child.stdout.strip() == "stopped True", child.stderr


def record_stop_condition(folder: str, worker_id: int) -> None:
    """A worker_init_fn: write whether this worker's waits in Go end on a
    condition, and whether it holds yet."""
    cond = _native._stop_when
    Path(folder, f"worker-{worker_id}").write_text(f"{cond is not None} {cond and cond()}")


def test_dataloader_workers_stop_waiting_when_the_loop_leaves(growing: str, tmp_path: Path) -> None:
    """croupier.DataLoader's workers end their waits in Go on their loop's
    done_event, which torch sets when the loop leaves the loader."""
    record = functools.partial(record_stop_condition, str(tmp_path))
    loader = cr.DataLoader(follow(growing), num_workers=2, worker_init_fn=record)
    assert len(list(loader)) > 0
    assert [(tmp_path / f"worker-{k}").read_text() for k in range(2)] == ["True False"] * 2


def wait_longer(worker: int, worker_id: int) -> None:
    """A worker_init_fn: worker ``worker`` waits 2 s for versions, the others as
    the dataset says."""
    info = torch.utils.data.get_worker_info()
    if worker_id == worker and info is not None:
        info.dataset._options["follow"]["wait_timeout_ns"] = 2_000_000_000


def test_dataloader_workers_end_at_the_last_step_in_order(tmp_path: Path) -> None:
    """When one worker's wait times out while another, still waiting, sees the
    versions that complete the round and makes the next steps, the iteration
    ends at the last step delivered in order: the later steps are neither
    delivered nor counted, and the next iteration deals them."""
    table_uri = uri(tmp_path / "t")
    table = cr.create_table(table_uri, roles.rows(list(range(30)), 0))
    table.append(roles.rows(list(range(30, 60)), 0))
    n = len(delivered(follow(table_uri, **ROUNDS), 0))
    # The worker of step n times out at once; the other waits, and the versions
    # of step n's round land once the loader has taken the first one's end.
    ds = follow(table_uri, **ROUNDS)
    loader = cr.DataLoader(ds, num_workers=2,
                           worker_init_fn=functools.partial(wait_longer, (n + 1) % 2))  # fmt: skip
    finished = threading.Event()

    def append() -> None:
        while not ds.stats().get("waited_out"):
            if finished.wait(0.001):
                return
        for v in range(2, 4):
            table.append(roles.rows(list(range(30 * v, 30 * (v + 1))), 0))

    appender = threading.Thread(target=append)
    appender.start()
    try:
        first = [batch["id"].tolist() for batch in loader]
    finally:
        finished.set()
        appender.join()
    want = delivered(follow(table_uri, **ROUNDS), 0)
    assert len(want) > n + 1
    assert first == [s["ids"] for s in want[:n]]
    assert ds.steps_consumed == n
    assert ds.stats()["steps"] == n
    assert delivered(ds, 0) == want[n:]


def test_dataloader_workers_divide_the_memory_budget(growing: str) -> None:
    """Each of K workers' followers holds (memory_budget - K * WORKER_ALLOWANCE)
    // K: a budget that holds a step in one process but not so divided fails in
    2 workers, with an error that says why, unless divide_budget=False."""
    from croupier.dataset import WORKER_ALLOWANCE

    # A step needs about 30 kB here, most of it 4 batches of steps read ahead.
    budget = 2 * WORKER_ALLOWANCE + 48_000
    want = delivered(follow(growing, budget), 0)
    with pytest.raises(cr.InvalidArgumentError, match="memory_budget 24000 bytes") as info:
        delivered(follow(growing, budget), 2)
    assert f"divides the dataset's memory_budget {budget} among its workers" in str(info.value)
    assert "divide_budget=False" in str(info.value)
    assert delivered(follow(growing, budget), 2, divide_budget=False) == want
    # With no budget set, the workers divide Go's default, which the dataset reports.
    assert follow(growing)._info["memory_budget"] == 512 << 20


def test_groups_filtered_in_token_steps(tmp_path: Path) -> None:
    """A GRPO learner following its generators' table: the samples of each prompt,
    appended together, are dealt whole in token-budget steps of at most 40 tokens,
    packed, without the aborted samples and those without a reward (wherever they lie
    in their group, and counted); the steps are the same at 1 and 2 ranks, and a state
    dict taken within a round resumes at 3 ranks with the rest."""
    rng = np.random.default_rng(3)
    table_uri = uri(tmp_path / "grpo")
    rows: list[dict[str, Any]] = []
    table = None
    for _ in range(10):
        version = []
        for _ in range(int(rng.integers(2, 6))):
            prompt = len({r["problem_id"] for r in rows + version})
            for _ in range(int(rng.integers(1, 6))):
                n = len(rows) + len(version)
                tokens = list(range(int(rng.integers(0, 8))))
                reward = None if rng.integers(6) == 0 else 1.0
                abort = bool(rng.integers(6) == 0)
                row = {"id": n, "problem_id": prompt, "tokens": tokens}
                version.append({**row, "reward": reward, "abort": abort})
        batch = pa.Table.from_pylist(version, schema=pa.schema([
            ("id", pa.int64()), ("problem_id", pa.int64()), ("tokens", pa.list_(pa.int32())),
            ("reward", pa.float64()), ("abort", pa.bool_())]))  # fmt: skip
        if table is None:
            table = cr.create_table(table_uri, batch)
        else:
            table.append(batch)
        rows += version
    kept = {r["id"] for r in rows if r["reward"] is not None and not r["abort"]}

    def dataset(rank: int, world: int) -> cr.FollowingDataset:
        return cr.FollowingDataset(
            table_uri,
            cr.Follow(group_by="problem_id", filter="NOT abort AND reward IS NOT NULL",
                      lengths="tokens", rows_per_round=12, wait_timeout=0.01, poll_interval=0.001),
            tokens_per_step=40, columns=["id", "problem_id", "tokens"], format="numpy",
            packing="packed", pack_columns=["tokens"], rank=rank, world_size=world,
        )  # fmt: skip

    def steps(ds: cr.FollowingDataset, n: int | None = None) -> list[list[int]]:
        out = []
        for batch in itertools.islice(ds, n):
            ids = batch["id"].tolist()
            assert np.diff(batch["cu_seqlens"]).tolist() == [len(rows[i]["tokens"]) for i in ids]
            assert sum(len(rows[i]["tokens"]) for i in ids) <= 40
            out.append(ids)
        return out

    alone = dataset(0, 1)
    want = steps(alone)
    assert len(want) > 4
    dealt = [i for ids in want for i in ids]
    assert len(dealt) == len(set(dealt))
    assert set(dealt) <= kept
    assert alone.stats()["filtered_rows"] > 0
    for ids in want:  # a prompt's kept samples are whole in their step
        for prompt in {rows[i]["problem_id"] for i in ids}:
            assert {i for i in ids if rows[i]["problem_id"] == prompt} == {
                r["id"] for r in rows if r["problem_id"] == prompt and r["id"] in kept
            }
    pair = [steps(dataset(rank, 2)) for rank in range(2)]
    assert [sorted(a + b) for a, b in zip(*pair, strict=True)] == [sorted(s) for s in want]
    for a, b in zip(*pair, strict=True):  # no prompt on both ranks
        assert not {rows[i]["problem_id"] for i in a} & {rows[i]["problem_id"] for i in b}
    first = dataset(1, 2)
    steps(first, 3)
    state = json.loads(json.dumps(first.state_dict()))
    assert state["tokens_per_step"] == 40
    resumed = []
    for rank in range(3):
        ds = dataset(rank, 3)
        ds.load_state_dict(state)
        resumed.append(steps(ds))
    assert [sorted(itertools.chain(*s)) for s in zip(*resumed, strict=True)] == [
        sorted(s) for s in want[3:]
    ]
