"""Grouped permutations: the rows sharing a key are dealt whole, in one step, to one rank
and one DataLoader worker, at every world size and after a resume."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import uri

import croupier as cr


def grouped_table(folder: Path, groups: int, seed: int) -> tuple[cr.Table, np.ndarray]:
    """Groups of 1 to 6 rows, scattered over the table; returns it and each row's key."""
    rng = np.random.default_rng(seed)
    keys = np.repeat(np.arange(groups) * 7919 % 100003, rng.integers(1, 7, groups))
    rng.shuffle(keys)
    folder.mkdir()
    pq.write_table(
        pa.table(
            {
                "id": pa.array(np.arange(len(keys), dtype=np.int64)),
                "problem_id": pa.array(keys),
                "problem": pa.array([f"p{k}" for k in keys.tolist()]),
            }
        ),
        folder / "rollouts.parquet",
        row_group_size=64,
    )
    return cr.open_table(uri(folder)), keys


def deal(
    split: cr.Permutation, g: int, w: int, epoch: int, **kwargs: object
) -> dict[int, tuple[int, int]]:
    """Where each row of one epoch goes: row id -> (step, rank); no row twice."""
    where: dict[int, tuple[int, int]] = {}
    for rank in range(w):
        ds = cr.StreamingDataset(
            split,
            global_batch_size=g,
            rank=rank,
            world_size=w,
            epoch=epoch,
            shuffle_seed=5,
            drop_last=False,
            columns=["id"],
            format="numpy",
            **kwargs,  # type: ignore[arg-type]
        )
        start = ds.steps_consumed
        for step, batch in enumerate(ds, start):
            for row in batch["id"].tolist():
                assert row not in where, f"row {row} dealt twice"
                where[row] = (step, rank)
        ds.close()
    return where


def steps_of(where: dict[int, tuple[int, int]]) -> dict[int, list[int]]:
    """Each step's rows, all ranks together, sorted."""
    steps: dict[int, list[int]] = defaultdict(list)
    for row, (step, _) in where.items():
        steps[step].append(row)
    return {step: sorted(rows) for step, rows in steps.items()}


def assert_whole(where: dict[int, tuple[int, int]], keys: np.ndarray) -> None:
    place: dict[int, tuple[int, int]] = {}
    for row, at in where.items():
        assert place.setdefault(int(keys[row]), at) == at, f"group {keys[row]} cut"


@pytest.mark.parametrize("key", ["problem_id", "problem"])
def test_groups_whole_at_every_world_size(tmp_path: Path, key: str) -> None:
    tbl, keys = grouped_table(tmp_path / "t", 900, seed=1)
    perms = (
        cr.PermutationBuilder(tbl)
        .group_by(key)
        .shuffle(seed=3)
        .persist(uri(tmp_path / "perm"), progress=False)
    )
    assert perms.provenance["format"] == 3
    assert perms.provenance["group_by"] == [key]
    g = 840  # a multiple of every world size from 1 to 8
    for epoch in (0, 1):
        reference = None
        for w in range(1, 9):
            where = deal(perms[0], g, w, epoch)
            assert sorted(where) == list(range(len(keys)))  # every row once
            assert_whole(where, keys)
            steps = steps_of(where)
            reference = reference or steps
            assert steps == reference, f"W={w}: other rows in the steps than at W=1"
    perms.close()
    tbl.close()


def test_groups_resume_at_another_world_size(tmp_path: Path) -> None:
    tbl, keys = grouped_table(tmp_path / "t", 300, seed=2)
    builder = cr.PermutationBuilder(tbl).group_by("problem_id").shuffle(seed=4)
    perms = builder.persist(uri(tmp_path / "p"))
    split = perms[0]
    reference = steps_of(deal(split, 60, 1, epoch=1))
    ds = cr.StreamingDataset(split, global_batch_size=60, world_size=2, epoch=1, shuffle_seed=5)
    for n, _ in enumerate(ds, 1):
        if n == 5:
            break
    state = ds.state_dict()
    assert (state["epoch"], state["steps_consumed"]) == (1, 5)
    where: dict[int, tuple[int, int]] = {}
    for rank in range(3):
        resumed = cr.StreamingDataset(
            split,
            global_batch_size=60,
            rank=rank,
            world_size=3,
            shuffle_seed=5,
            drop_last=False,
            columns=["id"],
            format="numpy",
        )
        resumed.load_state_dict(state)
        for step, batch in enumerate(resumed, 5):
            where.update((row, (step, rank)) for row in batch["id"].tolist())
    assert_whole(where, keys)
    assert steps_of(where) == {t: rows for t, rows in reference.items() if t >= 5}


def test_groups_in_dataloader_workers(tmp_path: Path) -> None:
    """Real worker processes (cr.DataLoader, num_workers=2) deal what num_workers=0
    deals: whole groups, each in one worker's step, every row once."""
    tbl, keys = grouped_table(tmp_path / "t", 300, seed=3)
    builder = cr.PermutationBuilder(tbl).group_by("problem_id").shuffle(seed=6)
    perms = builder.persist(uri(tmp_path / "p"))

    def batches(workers: int) -> list[list[int]]:
        ds = cr.StreamingDataset(
            perms[0], global_batch_size=24, rank=1, world_size=2, drop_last=False, columns=["id"]
        )
        loader = cr.DataLoader(ds, num_workers=workers, in_process=False)
        out = [batch["id"].tolist() for batch in loader]
        assert ds.state_dict()["epoch"] == 1
        return out

    alone, workers = batches(0), batches(2)
    assert workers == alone
    sizes = {len(b) for b in alone}
    assert len(sizes) > 1  # steps of whole groups vary in size
    rows = [row for batch in alone for row in batch]
    assert len(rows) == len(set(rows))
    counts = np.bincount(keys)
    for batch in alone:  # every group of rank 1's share whole
        got = np.bincount(keys[batch], minlength=len(counts))
        assert np.all((got == 0) | (got == counts))


def test_group_by_refuses_what_cuts_groups(tmp_path: Path) -> None:
    tbl, _ = grouped_table(tmp_path / "t", 20, seed=4)
    with pytest.raises(cr.InvalidArgumentError, match="split_random could cut a group"):
        (
            cr.PermutationBuilder(tbl)
            .group_by("problem_id")
            .split_random(ratios=[0.5, 0.5])
            .persist(uri(tmp_path / "p1"))
        )
    with pytest.raises(cr.InvalidArgumentError, match="clump_size and window do not apply"):
        (
            cr.PermutationBuilder(tbl)
            .group_by("problem_id")
            .shuffle(seed=1, clump_size=4)
            .persist(uri(tmp_path / "p2"))
        )
