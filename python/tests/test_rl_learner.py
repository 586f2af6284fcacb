"""examples/rl_learner.py trains, records its data's provenance (down to the rollouts of
every step), deals GRPO groups whole, and never leaks val into train."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import croupier as cr

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rl_learner.py"


def rows_in_id_order(table_folder: Path, version: int) -> pa.Table:
    """The rows of a croupier table version, read with pyarrow, row id i at position i.

    Row ids count rows through the version's data files in manifest order.
    """
    manifest = json.loads((table_folder / "_versions" / f"{version:020d}.json").read_text())
    return pa.concat_tables(pq.read_table(table_folder / f["key"]) for f in manifest["files"])


@pytest.mark.slow
def test_rl_learner(tmp_path: Path) -> None:
    data = tmp_path / "rl-data"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--data", str(data), "--steps", "6"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (data / "policy.pt").is_file()
    record = json.loads((data / "policy.json").read_text())
    assert record["steps"] == 6
    assert len(record["losses"]) == 6

    # The record names the latest table version (created, then appended once) and
    # the permutation actually persisted over it.
    with cr.open_table(record["table_uri"]) as tbl:
        assert tbl.version == 2 == record["table_version"]
        assert tbl.versions() == [1, 2]
    with cr.open_permutations(record["permutation_uri"]) as perms:
        assert perms.id == record["permutation_id"]
        assert perms.provenance["table_version"] == "2"
        assert perms.provenance["filter"] == record["filter"]
        assert record["provenance"]["id"] == perms.id
        assert record["loader_state"]["permutation_id"] == perms["train"].id
        train_ids = perms["train"].row_ids()
        val_ids = perms["val"].row_ids()

    rows = rows_in_id_order(data / "rollouts", 2)
    kept = pc.and_(rows["include_in_training"], pc.equal(rows["role"], "assistant"))
    assert len(train_ids) + len(val_ids) == pc.sum(kept).as_py()
    assert len(val_ids) > 0
    assert len(train_ids) > len(val_ids)
    train = rows.take(pa.array(train_ids))
    val = rows.take(pa.array(val_ids))
    for split in (train, val):
        assert pc.all(split["include_in_training"]).as_py()
        assert set(split["role"].to_pylist()) == {"assistant"}
    # all samples of a prompt are on one side
    assert not set(train["problem_id"].to_pylist()) & set(val["problem_id"].to_pylist())

    # The rollouts of every step trained, each a train row, in whole groups: all
    # of a problem's train rows in one step, and a problem in one step an epoch.
    assert perms.provenance["group_by"] == ["problem_id"]
    steps = record["trained_on"]
    assert [(s["epoch"], s["step"]) for s in steps] == [(0, t) for t in range(6)]
    group_sizes = Counter(train["problem_id"].to_pylist())
    train_rollouts = dict(
        zip(train["rollout_id"].to_pylist(), train["policy_version"].to_pylist(), strict=True)
    )
    seen: set[int] = set()
    for s in steps:
        assert s["rollout_id"], "a step with no rollout"
        for rollout, version in zip(s["rollout_id"], s["policy_version"], strict=True):
            assert train_rollouts[rollout] == version
        in_step = Counter(s["problem_id"])
        assert all(in_step[p] == group_sizes[p] for p in in_step), s
        assert not seen & set(in_step)
        seen |= set(in_step)
    assert len({len(s["rollout_id"]) for s in steps}) > 1  # whole groups: sizes vary


@pytest.mark.slow
def test_rl_learner_online(tmp_path: Path) -> None:
    """Online: generators append while the learner follows the table; the record names,
    for every step, the table versions and the rollouts that trained it, and its
    checkpoint resumes a follower of the grown table."""
    data = tmp_path / "rl-online"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--data", str(data), "--steps", "6", "--online"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((data / "policy.json").read_text())
    assert record["steps"] == len(record["losses"]) == 6
    assert "rollouts that trained the checkpoint" in done.stdout

    # Two generators appended 6 versions each to the first one.
    with cr.open_table(record["table_uri"]) as tbl:
        assert tbl.versions() == list(range(1, 14))
        rows = tbl.take(range(tbl.num_rows), ["rollout_id", "include_in_training"]).to_pydict()
    version_starts = [0]
    for v in range(1, 14):
        manifest = json.loads((data / "rollouts" / "_versions" / f"{v:020d}.json").read_text())
        version_starts.append(manifest["num_rows"])
    version_of = {}
    for v in range(1, 14):
        for i in range(version_starts[v - 1], version_starts[v]):
            version_of[rows["rollout_id"][i]] = v
    trainable = {
        r for r, k in zip(rows["rollout_id"], rows["include_in_training"], strict=True) if k
    }
    # A GRPO group, the trainable rollouts of one problem in one version
    # ("p<policy>-<problem>-<k>"), is trained on whole, in one step.
    group: dict[str, set[str]] = {}
    for r in trainable:
        group.setdefault(r.rsplit("-", 1)[0], set()).add(r)
    for s in record["trained_on"]:
        assert s["rollouts"], s
        assert set(s["rollouts"]) <= trainable
        assert {version_of[r] for r in s["rollouts"]} <= set(s["versions"])
        for prefix in {r.rsplit("-", 1)[0] for r in s["rollouts"]}:
            assert group[prefix] <= set(s["rollouts"]), (s["step"], prefix)

    # The checkpoint continues on the grown table with the next step.
    state = record["loader_state"]
    assert state["steps_consumed"] == 6
    assert json.loads((data / "state.json").read_text()) == state
    follow = cr.Follow(rows_per_round=128, group_by="problem_id", replay=0.25,
                       filter="include_in_training = TRUE AND role = 'assistant'",
                       lengths="output_tokens", max_versions_behind_newest=4, run="learner",
                       wait_timeout=1.0)  # fmt: skip
    ds = cr.FollowingDataset(record["table_uri"], follow, tokens_per_step=512,
                             columns=["rollout_id"], shuffle_seed=1234)  # fmt: skip
    ds.load_state_dict(state)
    next(iter(ds))
    assert ds.steps_consumed == 7

    # croupier deal, reading the checkpoint Python wrote, recomputes from the
    # table in one call every step's rollouts, as the learner recorded them.
    deal = subprocess.run(
        ["go", "run", "./cmd/croupier", "deal", "--checkpoint", str(data / "state.json"),
         "--steps", ":", "--columns", "rollout_id", "--json"],
        cwd=EXAMPLE.parents[1], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert deal.returncode == 0, deal.stderr[-3000:]
    dealt = {
        s["step"]: sorted({row["rollout_id"] for rank in s["ranks"] for row in rank["rows"]})
        for s in json.loads(deal.stdout)["steps"]
    }
    assert dealt == {s["step"]: s["rollouts"] for s in record["trained_on"]}

    # And the steps the learner recorded for a rollout.
    rollout = record["trained_on"][-1]["rollouts"][0]
    deal = subprocess.run(
        ["go", "run", "./cmd/croupier", "deal", "--checkpoint", str(data / "state.json"),
         "--which-steps", f"rollout_id={rollout}", "--json"],
        cwd=EXAMPLE.parents[1], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert deal.returncode == 0, deal.stderr[-3000:]
    steps = {t["step"] for t in json.loads(deal.stdout)["trained"]}
    assert steps == {s["step"] for s in record["trained_on"] if rollout in s["rollouts"]}
