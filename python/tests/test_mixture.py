"""Mixtures (docs/concepts.md, "Mixtures"), against spec_reference.py's
statement of which source fills each slot (mixture_plan) and the dealing
order of each source (rank_batches)."""

from __future__ import annotations

import functools
import itertools
import json
import threading
import time
from collections.abc import Iterator
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


def test_schedule_moves_the_weights(tables: list[cr.Table]) -> None:
    """Weights move linearly between the schedule's points and stay at the last."""
    points = [(0, [1.0, 0.0]), (10, [0.0, 1.0]), (20, [1.0, 1.0])]
    mix = mixture(tables, points[0][1], seed=0, schedule=points[1:])
    assert mix.weights_at(0) == [1.0, 0.0]
    assert mix.weights_at(5) == [0.5, 0.5]
    assert mix.weights_at(15) == [0.5, 1.0]
    assert mix.weights_at(99) == [1.0, 1.0]
    for t in (0, 5, 15, 99):
        assert mix.weights_at(t) == ref.mixture_weights(points, t)


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


# The sources of the slots of a scheduled mixture of sources of 6, 12 and 25
# steps, under each policy, until its iteration ends (at most 40 steps), and
# its last three slots: loader/mixture_test.go's TestMixtureGolden checks the
# same values.
GOLDEN = {
    "stop": ("010200012112222210", [(2, 0, 6), (1, 0, 4), (0, 0, 5)]),
    "cycle": (
        "01020001211222221020122001022000022202002022222100202202000000022202000222020002",
        [(0, 5, 5), (0, 6, 0), (2, 1, 9)],
    ),
    "renormalize": (
        "010200012112222210211221121221122222222222",
        [(2, 0, 21), (2, 0, 22), (2, 0, 23)],
    ),
}


@pytest.mark.parametrize("policy", sorted(GOLDEN))
def test_golden_plan(tables: list[cr.Table], policy: str) -> None:
    """The package's plan and the reference's are the golden one."""
    points = [(0, [0.7, 0.2, 0.1]), (10, [0.1, 0.2, 0.7]), (30, [1.0, 0.0, 1.0])]
    mix = mixture(tables, points[0][1], seed=11, schedule=points[1:], on_exhausted=policy, slots=2)
    sources, last = GOLDEN[policy]
    for plan in (mix.plan(40), ref.mixture_plan(11, points, 2, [6, 12, 25], policy, 40)):
        slots = [slot for step in plan for slot in step]
        assert "".join(str(i) for i, _, _ in slots) == sources
        assert slots[-3:] == last


# Realised proportions. A slot draws source i with probability w_i(t) / sum w(t),
# independently of every other slot, so the count of source i among n slots is
# binomial: its share has standard deviation sqrt(p (1 - p) / n).
STEPS, SLOTS = 10_000, 8


def drawn(
    tables: list[cr.Table], seed: int, points: list[tuple[int, list[float]]], n: int
) -> np.ndarray:
    """The source of each slot of mixture steps 0..STEPS-1, [step, slot], as the
    package draws them: a mixture of n sources that cycle, so that no source
    is ever out of the draw."""
    mix = mixture(
        tables[:n], points[0][1], seed=seed, schedule=points[1:], on_exhausted="cycle", slots=SLOTS
    )
    out = np.array([[i for i, _, _ in step] for step in mix.plan(STEPS)], dtype=np.int64)
    assert out.shape == (STEPS, SLOTS)
    assert out.min() >= 0
    assert out.max() < n
    return out


@pytest.mark.parametrize("seed", [0, 1, 2**64 - 1])
def test_realised_proportions_of_constant_weights(tables: list[cr.Table], seed: int) -> None:
    """Over 10,000 steps of 8 slots each source fills its weight's share of the
    slots within 1 % (absolute). With 80,000 slots the share's standard
    deviation is at most sqrt(0.25 / 80,000) = 0.0018: 1 % is more than 5 of them."""
    weights = [0.7, 0.2, 0.1]
    counts = np.bincount(drawn(tables, seed, [(0, weights)], 3).ravel(), minlength=3)
    shares = counts / (STEPS * SLOTS)
    assert np.abs(shares - weights).max() < 0.01, shares


@pytest.mark.parametrize("seed", [0, 7])
def test_schedule_takes_effect_at_its_steps(tables: list[cr.Table], seed: int) -> None:
    """90/10 until step 2,000, linear to 50/50 by step 4,000, 50/50 after: the
    share of source 1 in each window of 500 steps is the window's mean weight
    (from the reference's statement of the schedule) within 5 standard deviations
    (sd) of the binomial.

    A window holds 4,000 slots, so sd <= sqrt(0.25 / 4,000) = 0.008 and the
    tolerance 5 sd <= 0.04. On the ramp the weight moves 0.4 in 2,000 steps, so a
    schedule applied Δ steps early or late moves a ramp window's mean by
    Δ / 5,000: 0.04 at Δ = 200. The test asserts that the same draws, held
    against the schedule moved 500 steps either way (0.1 in a ramp window),
    fail it: it tells the named step from its neighbours."""
    window = 500
    points = [(0, [0.9, 0.1]), (2_000, [0.9, 0.1]), (4_000, [0.5, 0.5])]
    share = drawn(tables, seed, points, 2).reshape(STEPS // window, window * SLOTS).mean(axis=1)

    def misses(shift: int) -> np.ndarray:
        """The windows whose share is off the schedule moved by ``shift`` steps."""
        moved = [(0, [0.9, 0.1])] + [(t + shift, w) for t, w in points[1:]]
        p = np.array([ref.mixture_weights(moved, t)[1] for t in range(STEPS)])
        p = p.reshape(-1, window)  # source 1's probability at each step of each window
        sigma = np.sqrt((p * (1 - p)).sum(axis=1) * SLOTS) / (window * SLOTS)
        return np.abs(share - p.mean(axis=1)) > 5 * sigma

    assert not misses(0).any(), share
    assert misses(-window).any()
    assert misses(window).any()


def test_mixture_steps_come_from_the_drawn_sources(tables: list[cr.Table]) -> None:
    """End to end, over a schedule of the same shape (90/10 until step 40, 50/50
    from step 80, two slots, cycling sources): every slot of the Mixture's steps
    holds a batch of the source the reference names."""
    points = [(0, [0.9, 0.1]), (40, [0.9, 0.1]), (80, [0.5, 0.5])]
    mix = mixture(tables, [0.9, 0.1], seed=5, schedule=points[1:], on_exhausted="cycle", slots=2)
    got = [ids(step) for _, step in zip(range(120), mix, strict=False)]
    assert len(got) == 120
    plan = ref.mixture_plan(5, points, 2, [6, 12], "cycle", 120)
    counts = [0, 0]
    for t, step in enumerate(got):
        for j, (i, batch) in enumerate(step):
            assert i == plan[t][j][0], (t, j)
            assert batch == expected(i, plan[t][j][2], 1, 0)
            counts[i] += 1
    assert min(counts) > 0


# Token-budget sources: table i holds TOKEN_ROWS[i] documents whose ids start at
# 1000 * i and whose ``tokens`` hold length(id) tokens (0 to 30).
TOKEN_ROWS = (120, 60)
BUDGET = 64


def length(row_id: int) -> int:
    return row_id * 7 % 31


@pytest.fixture(scope="module")
def token_perms(tmp_path_factory: pytest.TempPathFactory) -> list[cr.Permutation]:
    root = tmp_path_factory.mktemp("mixture-tokens")
    out = []
    for i, n in enumerate(TOKEN_ROWS):
        ids = list(range(1000 * i, 1000 * i + n))
        tokens = [[x % 251] * length(x) for x in ids]
        data = pa.table({"id": ids, "tokens": pa.array(tokens, type=pa.list_(pa.int32()))})
        tbl = cr.create_table("file://" + str(root / f"t{i}"), data)
        perm = cr.PermutationBuilder(tbl).lengths("tokens").shuffle(seed=i)
        out.append(perm.persist("file://" + str(root / f"p{i}"))["all"])
    return out


def test_mixture_of_token_budget_steps(token_perms: list[cr.Permutation]) -> None:
    """A mixture of two token-budget datasets with packed output: each slot
    holds the next step of the source drawn, in the source's own order (across
    epochs), packed; at world size 3 the ranks' shares of a slot are the
    world-size-1 step's rows, and a checkpoint taken at world size 1 resumes
    there exactly."""
    steps, kwargs = 60, {"seed": 3, "schedule": [(20, [1, 1])], "on_exhausted": "cycle", "slots": 2}

    def sources(w: int = 1, r: int = 0) -> list[tuple[cr.StreamingDataset, float]]:
        return [
            (
                cr.StreamingDataset(
                    p,
                    tokens_per_step=BUDGET,
                    packing="packed",
                    pack_columns=["tokens"],
                    columns=["id", "tokens"],
                    shuffle_seed=1,
                    rank=r,
                    world_size=w,
                ),
                x,
            )
            for p, x in zip(token_perms, [0.8, 0.2], strict=True)
        ]

    def run(w: int = 1, r: int = 0, state: dict[str, Any] | None = None) -> list[Any]:
        mix = cr.Mixture(sources(w, r), **kwargs)
        if state is not None:
            mix.load_state_dict(state)
        return list(itertools.islice(mix, steps - mix.steps_consumed))

    def epochs(ds: cr.StreamingDataset) -> Iterator[Any]:
        """The steps of ``ds`` alone, epoch after epoch."""
        while True:
            yield from ds

    whole = run()
    own = [epochs(ds) for ds, _ in sources()]
    for t, step in enumerate(whole):
        for i, batch in step:
            want = next(own[i])["id"].tolist()
            assert batch["id"].tolist() == want, t
            lengths = [length(x) for x in want]
            assert sum(lengths) <= BUDGET
            assert batch["cu_seqlens"].tolist() == list(itertools.accumulate(lengths, initial=0))
            assert batch["tokens"].tolist() == [x % 251 for x in want for _ in range(length(x))]
            assert batch["position_ids"].tolist() == [k for n in lengths for k in range(n)]
    assert {i for step in whole for i, _ in step} == {0, 1}

    def by_rank(w: int, state: dict[str, Any] | None = None) -> list[list[Any]]:
        """The sources and the ids of each slot of each step, the ranks' shares joined."""
        shares = [run(w, r, state) for r in range(w)]
        return [
            [
                ({i for i, _ in slot}, sorted(x for _, b in slot for x in b["id"].tolist()))
                for slot in zip(*steps, strict=True)
            ]
            for steps in zip(*shares, strict=True)
        ]

    at_3 = by_rank(3)
    assert at_3 == [[({i}, sorted(b["id"].tolist())) for i, b in step] for step in whole]
    mix = cr.Mixture(sources(), **kwargs)
    for _ in itertools.islice(mix, 25):
        pass
    state = json.loads(json.dumps(mix.state_dict()))
    assert by_rank(3, state) == at_3[25:]


# Sources of the property and worker tests: tables of WIDE[i] rows whose ids
# start at 100,000 * i, dealt in stored order with WIDE_G rows a step, which
# 1 to 8 ranks divide.
WIDE_G = 840
WIDE = (2 * WIDE_G, 3 * WIDE_G, 5 * WIDE_G)


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> list[cr.Table]:
    root = tmp_path_factory.mktemp("mixture-wide")
    out = []
    for i, n in enumerate(WIDE):
        ids = np.arange(100_000 * i, 100_000 * i + n, dtype=np.int64)
        out.append(cr.create_table("file://" + str(root / f"t{i}"), pa.table({"id": ids})))
    return out


@functools.cache
def wide_steps(i: int) -> list[list[int]]:
    """The ids of each step of source i's epochs (the same every epoch)."""
    order = list(range(100_000 * i, 100_000 * i + WIDE[i]))
    return ref.rank_batches(order, WIDE_G, WIDE_G, 1, 0, True)


def wide_step(i: int, step: int) -> list[int]:
    return wide_steps(i)[step]


def wide_mixture(tables: list[cr.Table], w: int, r: int, **kwargs: Any) -> cr.Mixture:
    weights = kwargs.pop("weights")
    sources = [
        (cr.StreamingDataset(t, global_batch_size=WIDE_G, format="numpy", rank=r, world_size=w), x)
        for t, x in zip(tables, weights, strict=True)
    ]
    return cr.Mixture(sources, **kwargs)


def deal(
    tables: list[cr.Table],
    w: int,
    steps: int,
    workers: int = 0,
    state: dict[str, Any] | None = None,
    **kwargs: Any,
) -> list[list[tuple[int, list[int]]]]:
    """Up to ``steps`` mixture steps at world size w, the ranks' shares of each
    slot joined and sorted; rank 0 through croupier.DataLoader with
    ``workers`` workers when there are any."""
    shares = []
    for r in range(w):
        mix = wide_mixture(tables, w, r, **kwargs)
        if state is not None:
            mix.load_state_dict(state)
        source: Any = mix
        if r == 0 and workers:
            source = cr.DataLoader(mix, num_workers=workers, in_process=False)
        shares.append([ids(step) for step in itertools.islice(source, steps)])
        assert mix.steps_consumed == (state or {}).get("steps_consumed", 0) + len(shares[-1])
    assert len({len(s) for s in shares}) == 1
    return [
        [
            (slots[0][0], sorted(x for _, rows in slots for x in rows))
            for slots in zip(*step, strict=True)
        ]
        for step in zip(*shares, strict=True)
    ]


@settings(
    derandomize=True,
    deadline=None,
    max_examples=12,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**64 - 1),
    weights=st.lists(st.sampled_from([0.0, 0.5, 1.0, 3.0]), min_size=3, max_size=3).filter(any),
    slots=st.integers(1, 2),
    policy=st.sampled_from(["stop", "cycle", "renormalize"]),
    w=st.integers(1, 8),
    workers=st.sampled_from([0, 0, 0, 0, 1, 2, 3]),
    w2=st.integers(1, 8),
    at=st.integers(0, 11),
)
def test_mixture_is_world_size_and_worker_invariant(
    wide: list[cr.Table],
    seed: int,
    weights: list[float],
    slots: int,
    policy: str,
    w: int,
    workers: int,
    w2: int,
    at: int,
) -> None:
    """Every step holds the same sources' steps and rows at world sizes 1 to 8,
    with 0 to 3 workers; no row of a source comes twice in one of its epochs;
    a checkpoint taken after any step resumes at another world size with
    exactly the steps that follow."""
    steps = 12
    kwargs = {"seed": seed, "weights": weights, "slots": slots, "on_exhausted": policy}
    whole = deal(wide, 1, steps, **kwargs)
    plan = wide_mixture(wide, 1, 0, **kwargs).plan(steps)
    assert [[i for i, _ in step] for step in whole] == [[i for i, _, _ in s] for s in plan]
    seen: dict[tuple[int, int], set[int]] = {}
    for step, slots_plan in zip(whole, plan, strict=True):
        for (i, rows), (_, epoch, s) in zip(step, slots_plan, strict=True):
            assert rows == sorted(wide_step(i, s))
            epoch_rows = seen.setdefault((i, epoch), set())
            assert epoch_rows.isdisjoint(rows)
            epoch_rows.update(rows)
    assert deal(wide, w, steps, workers, **kwargs) == whole
    at = min(at, len(whole))
    mix = wide_mixture(wide, 1, 0, **kwargs)
    for _ in itertools.islice(mix, at):
        pass
    state = json.loads(json.dumps(mix.state_dict()))
    assert deal(wide, w2, steps - at, state=state, **kwargs) == whole[at:]


def test_workers_asked_for_read_in_process(wide: list[cr.Table]) -> None:
    """A mixture whose sources have no collate is read in the training process
    whatever num_workers asks, with the steps of no workers; a source's collate
    starts the workers."""
    kwargs = {"seed": 3, "weights": [1.0, 1.0, 2.0], "on_exhausted": "renormalize"}
    want = [ids(step) for step in wide_mixture(wide, 1, 0, **kwargs)]
    loader = cr.DataLoader(wide_mixture(wide, 1, 0, **kwargs), num_workers=2)
    assert loader.num_workers == 0
    assert [ids(step) for step in loader] == want
    collated = cr.Mixture(
        [(cr.StreamingDataset(t, global_batch_size=WIDE_G, collate=dict), 1.0) for t in wide],
        seed=3,
    )
    assert cr.DataLoader(collated, num_workers=2).num_workers == 2


def test_dataloader_workers_deal_a_mixture_and_resume(wide: list[cr.Table]) -> None:
    """Under croupier.DataLoader with 2 workers a mixture delivers the steps of 0
    workers; its state dict after 7 steps resumes at world size 2, with 3
    workers on rank 0, exactly; and an iteration that ends leaves the mixture
    where one of 0 workers does."""
    kwargs = {"seed": 3, "weights": [1.0, 1.0, 2.0], "on_exhausted": "renormalize"}
    mix = wide_mixture(wide, 1, 0, **kwargs)
    whole = [ids(step) for step in mix]
    assert len(whole) == sum(WIDE) // WIDE_G  # every source's epoch, whole
    end = mix.state_dict()
    loader = cr.DataLoader(wide_mixture(wide, 1, 0, **kwargs), num_workers=2, in_process=False)
    got = []
    for step in loader:
        got.append(ids(step))
        if len(got) == 7:
            state = json.loads(json.dumps(loader.state_dict()))
    assert got == whole
    assert loader.state_dict() == end
    rest = deal(wide, 2, len(whole), workers=3, state=state, **kwargs)
    assert [[(i, rows) for i, rows in step] for step in rest] == [
        [(i, sorted(rows)) for i, rows in step] for step in whole[7:]
    ]


def followed_and_pinned(
    table_uri: str, pinned: cr.Table, w: int, r: int, wait: float
) -> cr.Mixture:
    """A learner's mix: the rows appended to ``table_uri``, followed in rounds with
    replay, 70/30 with a pinned table, two slots a step."""
    follow = cr.Follow(rows_per_round=16, replay=0.25, wait_timeout=wait, poll_interval=0.001)
    fresh = cr.FollowingDataset(table_uri, follow, global_batch_size=G, columns=["id"],
                                format="numpy", shuffle_seed=3, rank=r, world_size=w)  # fmt: skip
    return cr.Mixture([(fresh, 0.7), (source(pinned, rank=r, world_size=w, shuffle_seed=4), 0.3)],
                      seed=11, on_exhausted="cycle", slots=2)  # fmt: skip


def joined(ranks: list[list[list[tuple[int, list[int]]]]]) -> list[list[tuple[int, list[int]]]]:
    """The steps every rank delivered, each slot's rows of all ranks together,
    sorted: as far as the rank that delivered fewest steps."""
    steps = min(len(steps) for steps in ranks)
    return [
        [
            (slots[0][0], sorted(i for rank in slots for i in rank[1]))
            for slots in zip(*per, strict=True)
        ]
        for per in zip(*(steps_[:steps] for steps_ in ranks), strict=True)
    ]


def test_a_learner_mixes_followed_rows_with_a_pinned_table(
    tables: list[cr.Table], tmp_path: Any
) -> None:
    """A mixture of a FollowingDataset and a pinned table under croupier.DataLoader
    with 2 workers, while a generator appends versions: the steps delivered are
    the first of those of 0 workers once the appends are done, the followed
    slots holding the follow stream's own steps; a state dict taken after step 5
    resumes at world size 2 with 3 workers per rank, while versions land again,
    with exactly the steps that follow."""
    table_uri = "file://" + str((tmp_path / "rollouts").resolve())
    table = cr.create_table(table_uri, pa.table({"id": np.arange(0, 30, dtype=np.int64)}))
    table.append(pa.table({"id": np.arange(30, 60, dtype=np.int64)}))
    pinned = tables[2]
    before = len([ids(step) for step in followed_and_pinned(table_uri, pinned, 1, 0, 0.01)])
    assert before > 0
    versions = iter(range(2, 30))

    def append(n: int) -> threading.Thread:
        def run() -> None:
            for v in itertools.islice(versions, n):
                table.append(pa.table({"id": np.arange(30 * v, 30 * v + 30, dtype=np.int64)}))
                time.sleep(0.01)

        return threading.Thread(target=run)

    appender = append(10)
    loader = cr.DataLoader(followed_and_pinned(table_uri, pinned, 1, 0, 1.0), num_workers=2,
                           in_process=False)  # fmt: skip
    got, state = [], None
    for step in loader:
        got.append(ids(step))
        if len(got) == 1:
            appender.start()
        if len(got) == 6:
            state = json.loads(json.dumps(loader.state_dict()))
    appender.join()
    assert state is not None
    assert len(got) >= before

    appender = append(10)
    appender.start()
    resumed = []
    for r in range(2):
        mix = followed_and_pinned(table_uri, pinned, 2, r, 1.0)
        loader = cr.DataLoader(mix, num_workers=3, in_process=False)
        loader.load_state_dict(state)
        resumed.append([ids(step) for step in loader])
    appender.join()

    want = [ids(step) for step in followed_and_pinned(table_uri, pinned, 1, 0, 0.01)]
    assert got == want[: len(got)]
    rest = joined(resumed)
    assert len(rest) > 0
    assert rest == [[(i, sorted(rows)) for i, rows in step] for step in want[6 : 6 + len(rest)]]
    # The followed slots hold the follow stream's steps, in its order.
    follow = cr.Follow(rows_per_round=16, replay=0.25, wait_timeout=0.01, poll_interval=0.001)
    alone = cr.FollowingDataset(table_uri, follow, global_batch_size=G, columns=["id"],
                                format="numpy", shuffle_seed=3)  # fmt: skip
    followed = [batch["id"].tolist() for batch in alone]
    fresh = [rows for step in want for i, rows in step if i == 0]
    assert fresh == followed[: len(fresh)]
    assert len(fresh) > 10


def nested_mixture(tables: list[cr.Table], w: int, r: int) -> cr.Mixture:
    """Table 0 mixed 1:1 with a mixture of tables 1 and 2, two slots each, the
    inner mixture cycling its sources and the outer one taking exhausted ones
    out of the draw."""

    def src(t: cr.Table) -> cr.StreamingDataset:
        return cr.StreamingDataset(
            t, global_batch_size=WIDE_G, format="numpy", rank=r, world_size=w
        )

    inner = cr.Mixture([(src(tables[1]), 1.0), (src(tables[2]), 2.0)], seed=5, slots=2,
                       on_exhausted="cycle")  # fmt: skip
    return cr.Mixture([(src(tables[0]), 1.0), (inner, 1.0)], seed=9, slots=2,
                      on_exhausted="renormalize")  # fmt: skip


def tree(step: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """A mixture step's slots, each the source's ids, or a nested mixture's slots."""
    return [(i, tree(v) if isinstance(v, list) else v["id"].tolist()) for i, v in step]


def joined_tree(ranks: list[list[tuple[int, Any]]]) -> list[tuple[int, Any]]:
    """One step's slots of every rank, each source's rows together, sorted."""
    out: list[tuple[int, Any]] = []
    for slots in zip(*ranks, strict=True):
        source, first = slots[0]
        if first and isinstance(first[0], tuple):  # a nested mixture's slots
            out.append((source, joined_tree([v for _, v in slots])))
        else:
            out.append((source, sorted(int(x) for _, rows in slots for x in rows)))
    return out


def test_a_mixture_mixes_a_mixture(wide: list[cr.Table]) -> None:
    """A mixture whose source is a mixture: each slot the inner mixture fills
    holds that mixture's step, its own slots, as plan() and rows_of_step() name
    them and in its own order; croupier.DataLoader's 2 workers deliver the steps
    of none; a state dict after 7 steps, through JSON, resumes at world size 2
    with 3 workers on rank 0 exactly."""
    steps = 30
    whole = [tree(step) for step in itertools.islice(nested_mixture(wide, 1, 0), steps)]
    assert len(whole) == steps
    plan = nested_mixture(wide, 1, 0).plan(steps)
    inner_steps = []

    def check(step: list[tuple[int, Any]], planned: list[Any], tables: list[int]) -> None:
        assert [i for i, _ in step] == [p[0] for p in planned]
        for (i, rows), p in zip(step, planned, strict=True):
            if len(p) == 4:  # a slot the inner mixture fills: its step's slots
                assert p[1] == 0
                inner_steps.append(p[2])
                check(rows, p[3], [1, 2])
            else:
                assert rows == wide_step(tables[i], p[2])

    for step, planned in zip(whole, plan, strict=True):
        check(step, planned, [0, -1])
    assert inner_steps == list(range(len(inner_steps)))
    assert len(inner_steps) > 10
    mix = nested_mixture(wide, 1, 0)

    def ids_of(rows: list[tuple[int, Any]], tables: list[int]) -> list[tuple[int, Any]]:
        """rows_of_step's row ids as the ids the tables hold."""
        return [
            (i, ids_of(r, [1, 2]) if isinstance(r, list) else (r + 100_000 * tables[i]).tolist())
            for i, r in rows
        ]

    for t in (0, 13, steps - 1):
        assert joined_tree([ids_of(mix.rows_of_step(t), [0, -1])]) == joined_tree([whole[t]])

    loader = cr.DataLoader(nested_mixture(wide, 1, 0), num_workers=2, in_process=False)
    got, state = [], None
    for step in itertools.islice(loader, steps):
        got.append(tree(step))
        if len(got) == 7:
            state = json.loads(json.dumps(loader.state_dict()))
    assert got == whole
    assert state is not None
    ranks = []
    for r in range(2):
        mix = nested_mixture(wide, 2, r)
        mix.load_state_dict(state)
        source: Any = cr.DataLoader(mix, num_workers=3, in_process=False) if r == 0 else mix
        ranks.append([tree(step) for step in itertools.islice(source, steps - 7)])
    rest = [joined_tree(list(per)) for per in zip(*ranks, strict=True)]
    assert rest == [joined_tree([step]) for step in whole[7:]]
