"""The dealing order of docs/concepts.md against the plain-Python reference in spec_reference.py."""

from __future__ import annotations

from collections import Counter

import pytest
import spec_reference as ref

import croupier as cr


def rank_ids(tbl: cr.Table, **kwargs: object) -> list[list[int]]:
    """Every batch of one rank's epoch, as lists of row ids (num_workers=0)."""
    ds = cr.StreamingDataset(tbl, columns=["id"], format="numpy", **kwargs)
    return [batch["id"].tolist() for batch in ds]


@pytest.mark.parametrize(
    ("s", "g", "w", "drop_last"),
    [
        (4, 8, 1, True),
        (4, 8, 2, True),
        (8, 16, 4, False),
        (5, 10, 1, False),
        (3, 3, 3, True),
        (16, 64, 4, False),
        (7, 21, 7, False),
        (1000, 1000, 8, False),
    ],
)
def test_batches_match_reference(
    table_uri: str, num_rows: int, s: int, g: int, w: int, drop_last: bool
) -> None:
    tbl = cr.open_table(table_uri)
    order = list(range(num_rows))  # a table deals its stored order (identity permutation)
    for r in range(w):
        ds = cr.StreamingDataset(
            tbl, global_batch_size=g, num_splits=s, rank=r, world_size=w, drop_last=drop_last
        )
        assert ds.steps_per_epoch == len(ds) == ref.steps_per_epoch(num_rows, s, g, drop_last)
        assert ds.rank_batch_size == g // w
        got = rank_ids(
            tbl, global_batch_size=g, num_splits=s, rank=r, world_size=w, drop_last=drop_last
        )
        assert got == ref.rank_batches(order, s, g, w, r, drop_last), f"rank {r} of {w}"


@pytest.mark.parametrize("drop_last", [True, False])
def test_every_row_once_per_epoch(table_uri: str, num_rows: int, drop_last: bool) -> None:
    tbl = cr.open_table(table_uri)
    s, g, w = 8, 24, 2
    seen: Counter[int] = Counter()
    for r in range(w):
        for batch in rank_ids(
            tbl, global_batch_size=g, num_splits=s, rank=r, world_size=w, drop_last=drop_last
        ):
            seen.update(batch)
    length = num_rows // s
    dealt = length * s if not drop_last else (length * s // g) * g
    assert set(seen.values()) == {1}
    assert len(seen) == dealt
    if not drop_last:  # all but the last M - S*L rows of the epoch order
        assert set(seen) == set(range(length * s))


def test_step_sets_do_not_depend_on_world_size(table_uri: str, num_rows: int) -> None:
    tbl = cr.open_table(table_uri)
    s, g = 12, 24
    expected = ref.global_steps(list(range(num_rows)), s, g, drop_last=False)
    for w in (1, 2, 3, 4):
        per_rank = [
            rank_ids(tbl, global_batch_size=g, num_splits=s, rank=r, world_size=w, drop_last=False)
            for r in range(w)
        ]
        steps = [set().union(*batches) for batches in zip(*per_rank, strict=True)]
        assert steps == expected, f"world size {w}"


def test_num_splits_defaults_to_global_batch_size(table_uri: str) -> None:
    ds = cr.StreamingDataset(cr.open_table(table_uri), global_batch_size=10)
    assert ds.num_splits == 10
    assert ds.global_batch_size == 10
    assert (ds.rank, ds.world_size) == (0, 1)


def test_identity_order_every_epoch(table_uri: str) -> None:
    tbl = cr.open_table(table_uri)
    first = rank_ids(tbl, global_batch_size=16, num_splits=4)
    assert rank_ids(tbl, global_batch_size=16, num_splits=4, epoch=3) == first
