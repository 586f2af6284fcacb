"""The examples run, and the torchrun example resumes a 2-process run on 3 processes exactly.

These start real processes (torch imports take seconds each), so they are
marked ``slow``; they are still part of the default run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch

import croupier as cr

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
G, S, SEED = 24, 12, 1234  # what examples/torchrun_resume.py passes to train.py


def run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_torchrun_resume_on_more_processes(tmp_path: Path) -> None:
    first, every = 7, 3
    run(
        str(EXAMPLES / "torchrun_resume.py"),
        "--work",
        str(tmp_path),
        "--rows",
        "600",
        "--first-steps",
        str(first),
        "--checkpoint-every",
        str(every),
        timeout=180,
    )
    log: dict[int, dict[int, list[int]]] = defaultdict(dict)  # step -> rank -> ids
    world: dict[int, int] = {}
    for line in (tmp_path / "ids.jsonl").read_text().splitlines():
        entry = json.loads(line)
        assert entry["epoch"] == 0
        step, rank = entry["step"], entry["rank"]
        assert rank not in log[step], f"step {step} rank {rank} logged twice"
        log[step][rank] = entry["ids"]
        assert world.setdefault(step, entry["world_size"]) == entry["world_size"]

    # the uninterrupted run, in this process
    train = cr.open_permutations("file://" + str(tmp_path / "permutation"))["train"]

    def uninterrupted(rank: int = 0, world_size: int = 1) -> list[list[int]]:
        ds = cr.StreamingDataset(
            train,
            global_batch_size=G,
            num_splits=S,
            columns=["rollout_id"],
            shuffle_seed=SEED,
            rank=rank,
            world_size=world_size,
            format="numpy",
        )
        return [b["rollout_id"].tolist() for b in ds]

    expected = uninterrupted()
    assert sorted(log) == list(range(len(expected))), "a step was lost or repeated"
    for step, ranks in log.items():
        assert world[step] == (2 if step < first else 3)
        assert sorted(ranks) == list(range(world[step]))
        union = [i for r in sorted(ranks) for i in ranks[r]]
        assert sorted(union) == sorted(expected[step]), f"step {step}"
    # each rank's batch, in order, as the dealing order says
    for w, steps in ((2, range(first)), (3, range(first, len(expected)))):
        for r in range(w):
            mine = uninterrupted(r, w)
            assert [log[t][r] for t in steps] == [mine[t] for t in steps]
    seen = [i for ranks in log.values() for ids in ranks.values() for i in ids]
    assert len(seen) == len(set(seen)), "a sample was trained on twice"

    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert (checkpoint["data"]["epoch"], checkpoint["data"]["steps_consumed"]) == (1, 0)


@pytest.mark.slow
def test_demo(tmp_path: Path) -> None:
    done = run(str(EXAMPLES / "demo.py"), "--data", str(tmp_path), timeout=180)
    assert "resume check: OK" in done.stdout
