"""The examples run, and the torchrun example resumes a 2-process run on 3 processes exactly.

These start real processes (torch imports take seconds each), so they are
marked ``slow``; they are still part of the default run.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch

import croupier as cr

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
G, S, SEED = 24, 12, 1234  # what examples/torchrun_resume.py passes to train.py


def run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, failure(done.stdout[-3000:], done.stderr)
    return done


# Where a process's crash report starts: Go's fatal errors and panics (the
# core's, in a rank), a signal, a Python traceback.
CRASH = re.compile(r"fatal error:|panic:|SIG[A-Z]+:|Traceback \(most recent call last\)")


def failure(stdout: str, stderr: str) -> str:
    """What a failed run printed: the end of its output and, where torchrun's
    summary of the ranks would push it out of that end, the start of the first
    crash report, which says why a rank died."""
    first = CRASH.search(stderr)
    if first is None:
        return stdout + stderr[-3000:]
    at = first.start()
    return stdout + stderr[max(at - 500, 0) : at + 4000] + "\n...\n" + stderr[-3000:]


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


def example(name: str) -> Any:
    """The module of examples/<name>.py, imported from its file."""
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_lm_pretrain_resumes_a_mixture_on_more_processes(tmp_path: Path) -> None:
    """examples/lm_pretrain.py trains on a scheduled mixture of two tables in
    token-budget steps on 2 processes, then resumes on 3: every step holds the
    source and the documents of the uninterrupted run's step, each rank its share."""
    first, steps = 7, 16
    mixing = argparse.Namespace(tokens_per_step=256, mix_start=4, mix_end=10)
    run(
        str(EXAMPLES / "lm_pretrain.py"),
        *("--work", str(tmp_path), "--rows", "300", "--max-tokens", "64"),
        *("--tokens-per-step", str(mixing.tokens_per_step)),
        *("--mix-start", str(mixing.mix_start), "--mix-end", str(mixing.mix_end)),
        *("--first-steps", str(first), "--steps", str(steps), "--checkpoint-every", "3"),
        timeout=180,
    )
    log: dict[int, dict[int, tuple[int, list[int]]]] = defaultdict(dict)  # step -> rank -> ...
    for line in (tmp_path / "steps.jsonl").read_text().splitlines():
        entry = json.loads(line)
        step, rank = entry["step"], entry["rank"]
        assert rank not in log[step], f"step {step} rank {rank} logged twice"
        assert entry["world_size"] == (2 if step < first else 3)
        log[step][rank] = (entry["source"], entry["ids"])
    assert sorted(log) == list(range(steps)), "a step was lost or repeated"

    lm = example("lm_pretrain")

    def uninterrupted(rank: int = 0, world_size: int = 1) -> list[tuple[int, list[int]]]:
        mix = lm.mixture(tmp_path, mixing, rank=rank, world_size=world_size)
        return [(i, b["id"].tolist()) for [(i, b)] in itertools.islice(mix, steps)]

    expected = uninterrupted()
    assert {i for i, _ in expected} == {0, 1}, "the schedule draws both tables"
    for step, ranks in log.items():
        source, ids = expected[step]
        assert sorted(ranks) == list(range(2 if step < first else 3))
        assert {i for i, _ in ranks.values()} == {source}, f"step {step}"
        union = [i for _, mine in ranks.values() for i in mine]
        assert sorted(union) == sorted(ids), f"step {step}"
        assert all(i // 1_000_000 == source for i in union)  # the source is in the id
    for w, span in ((2, range(first)), (3, range(first, steps))):
        for r in range(w):
            mine = uninterrupted(r, w)
            assert [log[t][r] for t in span] == [mine[t] for t in span]

    checkpoint = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert checkpoint["data"]["steps_consumed"] == steps
