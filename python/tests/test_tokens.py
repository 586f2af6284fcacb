"""Token-budget steps and packing (docs/concepts.md, "Token-budget steps";
docs/python.md, "Packing").

The steps and each rank's share are compared with spec_reference.py
(token_steps, token_shares), a plain-Python statement of the rule, over
random budgets, world sizes 1-8, worker counts 0-3, epochs and resume points;
one test runs real DataLoader worker processes.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import spec_reference as ref
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import croupier as cr
from croupier import _lib

ROWS = 300
SEED = 4  # of the permutation's shuffle
RUN_SEED = 9  # shuffle_seed of the runs: the order of epochs after the first

pytestmark = pytest.mark.filterwarnings(
    "ignore:This DataLoader will create .* worker processes:UserWarning"
)


def length(row_id: int) -> int:
    """Tokens in row ``row_id`` of the table (0 to 11, some rows empty)."""
    return row_id * 7 % 12


def write_rollouts(folder: Path) -> str:
    """Rows whose ``tokens``, ``logprobs`` and ``mask`` lists are ``length(id)`` long,
    and whose ``other`` list is not aligned with them."""
    folder.mkdir(parents=True)
    ids = np.arange(ROWS, dtype=np.int64)
    tokens = [list(range(i * 100, i * 100 + length(i))) for i in ids.tolist()]
    pq.write_table(
        pa.table(
            {
                "id": pa.array(ids),
                "tokens": pa.array(tokens, type=pa.list_(pa.int32())),
                "logprobs": pa.array(
                    [[-0.5 * t for t in row] for row in tokens], type=pa.list_(pa.float32())
                ),
                "mask": pa.array([[True] * len(row) for row in tokens], type=pa.list_(pa.bool_())),
                "other": pa.array([[1] * (length(i) + 1) for i in ids.tolist()]),
            }
        ),
        folder / "part-00000.parquet",
        row_group_size=64,
    )
    return "file://" + str(folder.resolve())


@pytest.fixture(scope="module")
def perm(tmp_path_factory: pytest.TempPathFactory) -> cr.Permutation:
    root = tmp_path_factory.mktemp("tokens")
    tbl = cr.open_table(write_rollouts(root / "table"))
    perms = (
        cr.PermutationBuilder(tbl)
        .lengths("tokens")
        .shuffle(seed=SEED)
        .persist("file://" + str(root / "perm"))
    )
    return perms["all"]


def order(perm: cr.Permutation, epoch: int) -> list[int]:
    """The row ids of the epoch order, from the reference's epoch orders."""
    return ref.epoch_order(perm.row_ids().tolist(), True, None, RUN_SEED, epoch)


def reference(perm: cr.Permutation, budget: int, w: int, epoch: int) -> list[list[list[int]]]:
    """Each step's rows of each rank, by the reference rule."""
    ids = order(perm, epoch)
    out = []
    for positions in ref.token_steps([length(i) for i in ids], budget):
        rows = [ids[p] for p in positions]
        shares = ref.token_shares([length(i) for i in rows], budget, w)
        out.append([[rows[i] for i in share] for share in shares])
    return out


def dataset(perm: cr.Permutation, budget: int, **kwargs: Any) -> cr.StreamingDataset:
    options: dict[str, Any] = {"format": "numpy", "columns": ["id"], "shuffle_seed": RUN_SEED}
    options.update(kwargs)
    return cr.StreamingDataset(perm, tokens_per_step=budget, **options)


def worker_steps(
    ds: cr.StreamingDataset, epoch: int, start: int, worker: int, workers: int
) -> list[tuple[int, list[int]]]:
    """``(step, ids)`` of the Go stream of worker ``worker`` of ``workers``."""
    options = {"epoch": epoch, "start_step": start, "worker": worker, "num_workers": workers}
    stream = _lib.stream_open(ds._handle(), options)
    out = []
    try:
        while (item := _lib.stream_next(stream.value)) is not None:
            assert item[1] == 1  # one step a batch
            out.append((item[0], item[2].column("id").to_pylist()))
    finally:
        stream.close()
    return out


@settings(
    derandomize=True,
    deadline=None,
    max_examples=30,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    budget=st.integers(11, 60),
    w=st.integers(1, 8),
    workers=st.integers(0, 3),
    epoch=st.integers(0, 2),
    resume=st.floats(0, 1),
)
def test_steps_follow_the_reference(
    perm: cr.Permutation, budget: int, w: int, workers: int, epoch: int, resume: float
) -> None:
    """Every rank's share of every step is the reference's, from any resume
    step and for any worker: so the steps are the same at every world size and
    worker count, no row is lost or repeated, and the ranks' loads differ by at
    most one row's length."""
    want = reference(perm, budget, w, epoch)
    start = int(resume * len(want))
    seen: list[int] = []
    for r in range(w):
        ds = dataset(perm, budget, rank=r, world_size=w, epoch=epoch)
        assert ds.steps_per_epoch == len(want)
        assert len(ds) == len(want)
        got = sorted(
            item
            for k in range(max(workers, 1))
            for item in worker_steps(ds, epoch, start, k, workers)
        )
        assert [step for step, _ in got] == list(range(start, len(want)))
        for step, ids in got:
            assert ids == want[step][r], (step, r)
            seen += ids
        ds.close()
    dealt = [i for step in want[start:] for share in step for i in share]
    assert sorted(seen) == sorted(dealt)
    if start == 0:
        assert sorted(seen) == list(range(ROWS))  # every row once
    for step in want:
        loads = [sum(length(i) for i in share) for share in step]
        longest = max((length(i) for share in step for i in share), default=0)
        assert max(loads) - min(loads) <= longest
        assert sum(loads) <= budget


def test_resume_at_another_world_size(perm: cr.Permutation) -> None:
    """A checkpoint taken at world size 3 resumes at world size 5, and the
    remaining steps are those of the uninterrupted run."""
    budget = 40
    ds = dataset(perm, budget, rank=1, world_size=3, epoch=1)
    it = iter(ds)
    for _ in range(7):
        next(it)
    state = ds.state_dict()
    assert state["tokens_per_step"] == budget
    assert state["oversize"] == "error"
    assert (state["epoch"], state["steps_consumed"]) == (1, 7)
    want = reference(perm, budget, 5, 1)
    for r in range(5):
        resumed = dataset(perm, budget, rank=r, world_size=5)
        resumed.load_state_dict(state)
        assert len(resumed) == len(want) - 7
        assert [b["id"].tolist() for b in resumed] == [step[r] for step in want[7:]]
        assert (resumed.epoch, resumed.steps_consumed) == (2, 0)
    with pytest.raises(cr.InvalidArgumentError, match="tokens_per_step"):
        dataset(perm, budget + 1).load_state_dict(state)
    samples = cr.StreamingDataset(perm, global_batch_size=4)
    with pytest.raises(cr.InvalidArgumentError, match="sample-count steps"):
        samples.load_state_dict(state)


def test_dataloader_workers_pack(perm: cr.Permutation) -> None:
    """Real DataLoader worker processes deal token-budget steps in order,
    packed, with an exact checkpoint after every batch."""
    budget, w = 30, 2
    want = reference(perm, budget, w, 0)
    ds = dataset(
        perm,
        budget,
        rank=1,
        world_size=w,
        format="torch",
        columns=["id", "tokens", "logprobs"],
        packing="packed",
        pack_columns=["tokens", "logprobs"],
    )
    loader = cr.DataLoader(ds, num_workers=2, in_process=False)
    got = []
    for i, batch in enumerate(loader):
        ids = batch["id"].tolist()
        got.append(ids)
        lengths = [length(r) for r in ids]
        assert batch["cu_seqlens"].dtype == torch.int32
        assert batch["cu_seqlens"].tolist() == np.cumsum([0, *lengths]).tolist()
        assert batch["tokens"].tolist() == [r * 100 + j for r in ids for j in range(length(r))]
        assert batch["position_ids"].tolist() == [j for r in ids for j in range(length(r))]
        assert torch.equal(batch["logprobs"], batch["tokens"].float() * -0.5)
        assert loader.state_dict()["steps_consumed"] == i + 1
        if i == 3:
            break
    assert got == [step[1] for step in want[:4]]


def test_packing_formats(perm: cr.Permutation) -> None:
    """Packed and padded steps hold each row's values, in every format."""
    budget = 50
    rows = reference(perm, budget, 1, 0)[0][0]
    cols = ["id", "tokens", "logprobs", "mask"]
    packed = ["tokens", "logprobs", "mask"]

    def first(**kwargs: Any) -> Any:
        return next(iter(dataset(perm, budget, columns=cols, pack_columns=packed, **kwargs)))

    lengths = np.array([length(r) for r in rows])
    tokens = [r * 100 + j for r in rows for j in range(length(r))]
    for fmt in ("numpy", "torch"):
        out = first(format=fmt, packing="packed")
        assert np.asarray(out["tokens"]).tolist() == tokens
        assert np.asarray(out["mask"]).all()
        assert len(out["mask"]) == lengths.sum()
        padded = first(format=fmt, packing="padded", pad_value={"tokens": -1})
        assert tuple(padded["tokens"].shape) == (len(rows), lengths.max())
        mask = np.asarray(padded["attention_mask"])
        assert mask.sum(axis=1).tolist() == lengths.tolist()
        assert np.asarray(padded["tokens"])[mask].tolist() == tokens
        assert (np.asarray(padded["tokens"])[~mask] == -1).all()
        assert (np.asarray(padded["logprobs"])[~mask] == 0).all()
        assert (
            np.asarray(padded["position_ids"])[mask].tolist()
            == np.asarray(out["position_ids"]).tolist()
        )
        assert np.asarray(padded["id"]).tolist() == rows
    arrow = first(format="arrow", packing="packed")
    assert arrow["tokens"].to_pylist() == tokens
    assert arrow["cu_seqlens"].to_pylist() == np.cumsum([0, *lengths]).tolist()


def test_truncate_and_errors(perm: cr.Permutation) -> None:
    """A row longer than the budget is an error naming it, or with
    oversize="truncate" a step of its own cut to the budget; options that do
    not fit are refused, naming the fix."""
    with pytest.raises(cr.InvalidArgumentError, match=r"row \d+ \(position \d+ .* is 11 long"):
        dataset(perm, 10)
    ds = dataset(
        perm,
        10,
        columns=["id", "tokens", "logprobs"],
        oversize="truncate",
        packing="packed",
        pack_columns=["tokens", "logprobs"],
    )
    ids = order(perm, 0)
    want = ref.token_steps([length(i) for i in ids], 10)
    steps = list(ds)
    assert len(steps) == len(want)
    for positions, batch in zip(want, steps, strict=True):
        rows = [ids[p] for p in positions]
        assert batch["id"].tolist() == rows
        assert batch["tokens"].tolist() == [
            r * 100 + j for r in rows for j in range(min(length(r), 10))
        ]
        assert len(batch["logprobs"]) == len(batch["tokens"])
    for kwargs, message in [
        ({"oversize": "truncate"}, "packing"),
        ({"packing": "packed"}, "pack_columns"),
        (
            {
                "packing": "packed",
                "pack_columns": ["tokens", "other"],
                "columns": ["tokens", "other"],
            },
            "not aligned",
        ),
        ({"packing": "padded", "pack_columns": ["tokens"], "format": "arrow"}, "does not apply"),
        ({"drop_last": True}, "drop_last does not apply"),
        ({"global_batch_size": 8}, "exactly one"),
    ]:
        with pytest.raises(cr.InvalidArgumentError, match=message):
            next(iter(dataset(perm, 40, **kwargs)))
    plain = cr.open_permutations(perm.permutations.uri)
    tbl = plain.table
    with pytest.raises(cr.InvalidArgumentError, match="lengths=<column>"):
        cr.StreamingDataset(tbl, tokens_per_step=40)


def test_groups_filtered_in_token_steps(tmp_path: Path) -> None:
    """A GRPO learner's permutation: the filter drops aborted samples and those
    without a reward before the samples of each prompt form a group; in steps of at
    most 60 tokens, packed, every rank of 1 to 3 gets exactly the groups the reference
    rule (spec_reference.group_token_deal) gives it, whole, and a state dict taken at
    2 ranks resumes at 3 with the rest of the epoch."""
    rng = np.random.default_rng(5)
    keys = np.repeat(np.arange(80), rng.integers(1, 7, 80))
    rng.shuffle(keys)
    n = len(keys)
    tokens = [list(range(int(k) * 100, int(k) * 100 + int(rng.integers(0, 10)))) for k in keys]
    reward = [None if rng.integers(8) == 0 else float(i) for i in range(n)]
    abort = (rng.integers(8, size=n) == 0).tolist()
    (tmp_path / "t").mkdir()
    pq.write_table(
        pa.table(
            {
                "id": pa.array(np.arange(n, dtype=np.int64)),
                "problem_id": pa.array(keys.astype(np.int64)),
                "tokens": pa.array(tokens, type=pa.list_(pa.int32())),
                "reward": pa.array(reward, type=pa.float64()),
                "abort": pa.array(abort),
            }
        ),
        tmp_path / "t" / "part-0.parquet",
        row_group_size=32,
    )
    tbl = cr.open_table("file://" + str(tmp_path / "t"))
    perm = (
        cr.PermutationBuilder(tbl)
        .filter("NOT abort AND reward IS NOT NULL")
        .group_by("problem_id")
        .lengths("tokens")
        .shuffle(seed=3)
        .persist("file://" + str(tmp_path / "p"))
    )["all"]
    kept = [i for i in range(n) if reward[i] is not None and not abort[i]]
    ids = perm.row_ids().tolist()  # epoch 0: the stored order, each group's rows together
    assert sorted(ids) == kept
    groups: list[list[int]] = []
    for i, row in enumerate(ids):
        if i == 0 or keys[row] != keys[ids[i - 1]]:
            groups.append([])
        groups[-1].append(row)
    budget = 60

    def dataset(rank: int, w: int) -> cr.StreamingDataset:
        return cr.StreamingDataset(
            perm, tokens_per_step=budget, rank=rank, world_size=w, format="numpy",
            columns=["id", "tokens"], packing="packed", pack_columns=["tokens"],
        )  # fmt: skip

    for w in (1, 2, 3):
        want = ref.group_token_deal([[len(tokens[r]) for r in g] for g in groups], budget, w)
        for rank in range(w):
            ds = dataset(rank, w)
            got = []
            for batch in itertools.islice(ds, len(want)):
                got.append(batch["id"].tolist())
                lengths = np.diff(batch["cu_seqlens"]).tolist()
                assert lengths == [len(tokens[r]) for r in got[-1]]
                assert batch["tokens"].tolist() == [t for r in got[-1] for t in tokens[r]]
            assert got == [[r for g in step[rank] for r in groups[g]] for step in want]
    # Stopped after 4 steps at 2 ranks, resumed at 3: the rest of the epoch.
    first = dataset(0, 2)
    for _ in itertools.islice(first, 4):
        pass
    state = first.state_dict()
    want = ref.group_token_deal([[len(tokens[r]) for r in g] for g in groups], budget, 3)
    for rank in range(3):
        ds = dataset(rank, 3)
        ds.load_state_dict(state)
        got = [batch["id"].tolist() for batch in itertools.islice(ds, len(want) - 4)]
        assert got == [[r for g in step[rank] for r in groups[g]] for step in want[4:]]
