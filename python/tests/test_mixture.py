"""Mixtures (docs/concepts.md, "Mixtures"), against spec_reference.py's
statement of which source fills each slot (mixture_plan) and the dealing
order of each source (rank_batches)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import spec_reference as ref
import torch.utils.data
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import croupier as cr

# Source i is a table of ROWS[i] rows whose ids start at 1000 * i, dealt in
# stored order with G rows a step.
ROWS = (48, 96, 200)
G = 8


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> list[cr.Table]:
    root = tmp_path_factory.mktemp("mixture")
    out = []
    for i, n in enumerate(ROWS):
        folder = root / f"t{i}"
        folder.mkdir()
        ids = np.arange(1000 * i, 1000 * i + n, dtype=np.int64)
        pq.write_table(pa.table({"id": ids}), folder / "part-00000.parquet", row_group_size=32)
        out.append(cr.open_table("file://" + str(folder.resolve())))
    return out


def source(tbl: cr.Table, **kwargs: Any) -> cr.StreamingDataset:
    return cr.StreamingDataset(tbl, global_batch_size=G, format="numpy", columns=["id"], **kwargs)


def expected(i: int, step: int, w: int, r: int) -> list[int]:
    """Rank r of w's ids at a step of source i (the same order every epoch)."""
    order = list(range(1000 * i, 1000 * i + ROWS[i]))
    return ref.rank_batches(order, G, G, w, r, True)[step]


def mixture(
    tables: list[cr.Table], weights: list[float], w: int = 1, r: int = 0, **kwargs: Any
) -> cr.Mixture:
    sources = [(source(t, rank=r, world_size=w), x) for t, x in zip(tables, weights, strict=False)]
    return cr.Mixture(sources, **kwargs)


def ids(step: list[tuple[int, Any]]) -> list[tuple[int, list[int]]]:
    return [(i, batch["id"].tolist()) for i, batch in step]


@settings(
    derandomize=True,
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**64 - 1),
    weights=st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0]), min_size=2, max_size=3).filter(any),
    late=st.lists(st.sampled_from([0.0, 1.0, 2.0]), min_size=3, max_size=3),
    at=st.sampled_from([None, 5, 20]),
    slots=st.integers(1, 3),
    policy=st.sampled_from(["stop", "cycle", "renormalize"]),
    w=st.sampled_from([1, 2, 4]),
)
def test_mixture_follows_the_reference(
    tables: list[cr.Table],
    seed: int,
    weights: list[float],
    late: list[float],
    at: int | None,
    slots: int,
    policy: str,
    w: int,
) -> None:
    """Every slot of every step holds the step of the source the reference
    picks, at every world size and on every rank."""
    n = len(weights)
    schedule = [] if at is None else [(at, late[:n])]
    points = [(0, weights), *schedule]
    spe = [ROWS[i] // G for i in range(n)]
    want = ref.mixture_plan(seed, points, slots, spe, policy, max_steps=40)
    for r in range(w):
        mix = mixture(
            tables, weights, w, r, seed=seed, schedule=schedule, on_exhausted=policy, slots=slots
        )
        got = [ids(step) for _, step in zip(range(40), mix, strict=False)]
        assert len(got) == len(want)
        for t, (step, plan) in enumerate(zip(got, want, strict=True)):
            assert step == [(i, expected(i, s, w, r)) for i, _, s in plan], t
        assert mix.steps_consumed == len(want)


def test_schedule_moves_the_weights() -> None:
    """Weights move linearly between the schedule's points and stay at the last."""
    from croupier.mixture import weights_at

    points = [(0, [1.0, 0.0]), (10, [0.0, 1.0]), (20, [1.0, 1.0])]
    assert weights_at(points, 0) == [1.0, 0.0]
    assert weights_at(points, 5) == [0.5, 0.5]
    assert weights_at(points, 15) == [0.5, 1.0]
    assert weights_at(points, 99) == [1.0, 1.0]
    for t in (0, 5, 15, 99):
        assert weights_at(points, t) == ref.mixture_weights(points, t)


def test_resume_at_another_world_size(tables: list[cr.Table]) -> None:
    """A mixture checkpoint (through JSON) taken at world size 1 resumes at
    world size 2 with exactly the remaining steps; a different mixture refuses it."""
    kwargs: dict[str, Any] = {"seed": 7, "schedule": [(6, [1, 3])], "on_exhausted": "renormalize"}
    mix = mixture(tables, [2, 1], **kwargs)
    it = iter(mix)
    for _ in range(5):
        next(it)
    state = json.loads(json.dumps(mix.state_dict()))
    want = ref.mixture_plan(7, [(0, [2, 1]), (6, [1, 3])], 1, [6, 12], "renormalize", 100)
    for r in range(2):
        resumed = mixture(tables, [2, 1], 2, r, **kwargs)
        resumed.load_state_dict(state)
        got = [ids(step) for step in resumed]
        assert got == [[(i, expected(i, s, 2, r)) for i, _, s in plan] for plan in want[5:]]
    for change, message in [
        ({"seed": 8}, "seed"),
        ({"schedule": [(6, [1, 2])]}, "schedule"),
        ({"on_exhausted": "cycle"}, "on_exhausted"),
        ({"slots": 2}, "slots"),
    ]:
        with pytest.raises(cr.InvalidArgumentError, match=message):
            mixture(tables, [2, 1], **{**kwargs, **change}).load_state_dict(state)
    with pytest.raises(cr.InvalidArgumentError, match="3 sources"):
        mixture(tables, [2, 1, 1], **kwargs).load_state_dict(state)
    swapped = cr.Mixture([(source(tables[1]), 2), (source(tables[0]), 1)], **kwargs)
    with pytest.raises(cr.InvalidArgumentError, match=r"mixture source 0: .*table_id"):
        swapped.load_state_dict(state)


def test_next_iteration_continues(tables: list[cr.Table]) -> None:
    """After an iteration stops on an exhausted source, the sources whose epoch
    ended start their next one and the steps go on."""
    mix = mixture(tables, [1, 1], seed=1, on_exhausted="stop")
    first = list(mix)
    plan = ref.mixture_plan(1, [(0, [1, 1])], 1, [6, 12], "stop", 100)
    assert len(first) == len(plan)
    state = mix.state_dict()
    assert state["steps_consumed"] == len(plan)
    ended = [s["epoch"] for s in state["sources"]]
    assert 1 in ended  # the source that stopped the iteration moved to its next epoch
    assert len(list(mix)) > 0


def test_refusals(tables: list[cr.Table]) -> None:
    """Bad weights, schedules and policies are refused; so are worker processes."""
    for kwargs, message in [
        ({"seed": 0, "on_exhausted": "drop"}, "on_exhausted"),
        ({"seed": 0, "schedule": [(0, [1, 1])]}, "increase"),
        ({"seed": 0, "schedule": [(4, [1])]}, "for 2 sources"),
        ({"seed": -1}, "seed"),
    ]:
        with pytest.raises(cr.InvalidArgumentError, match=message):
            mixture(tables, [1, 1], **kwargs)
    for weights, message in [([0, 0], "all 0"), ([1, -1], ">= 0"), ([1, float("nan")], ">= 0")]:
        with pytest.raises(cr.InvalidArgumentError, match=message):
            mixture(tables, weights, seed=0)
    with pytest.raises(cr.InvalidArgumentError, match="one rank"):
        cr.Mixture([(source(tables[0]), 1), (source(tables[1], world_size=2), 1)], seed=0)
    loader = torch.utils.data.DataLoader(
        mixture(tables, [1, 1], seed=0),
        batch_size=None,
        num_workers=1,
        multiprocessing_context="spawn",
    )
    with pytest.raises(cr.InvalidArgumentError, match="num_workers=0"):
        next(iter(loader))


def test_plan_depends_only_on_seed_step_and_weights(tmp_path: Path) -> None:
    """The reference's draws are those the package makes."""
    from croupier.mixture import draw

    for seed, t, j in [(0, 0, 0), (2**64 - 1, 12345, 3), (9, 1, 0)]:
        assert draw(seed, t, j) == ref.mixture_u(seed, t, j)
