"""Provenance: the rows of a step (``rows_of_step``) and the rows themselves (``Table.take``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import uri

import croupier as cr


def test_take_gives_rows_in_the_order_asked(table_uri: str) -> None:
    with cr.open_table(table_uri) as tbl:
        ids = [1002, 5, 400, 5, 0, 777]
        got = tbl.take(ids, columns=["text", "id"])
        assert isinstance(got, pa.Table)
        assert got.column_names == ["text", "id"]
        assert got["id"].to_pylist() == ids
        assert got["text"].to_pylist() == [f"row {i}" for i in ids]
        assert tbl.take(np.array([3, 2], dtype=np.int32))["id"].to_pylist() == [3, 2]
        assert tbl.take([], columns=["id"]).num_rows == 0
        assert tbl.take([7]).column_names == tbl.schema.names
        with pytest.raises(cr.InvalidArgumentError, match="1003"):
            tbl.take([1003])
        with pytest.raises(cr.InvalidArgumentError, match=">= 0"):
            tbl.take([-1])
        with pytest.raises(cr.InvalidArgumentError, match="nope"):
            tbl.take([1], columns=["nope"])


def steps_of(ds: cr.StreamingDataset) -> list[list[int]]:
    return [batch["id"].tolist() for batch in ds]


@pytest.mark.parametrize("grouped", [False, True])
def test_rows_of_step_are_what_every_rank_trains_on(tmp_path: Path, grouped: bool) -> None:
    rng = np.random.default_rng(0)
    keys = np.repeat(np.arange(150), rng.integers(1, 5, 150))
    rng.shuffle(keys)
    folder = tmp_path / "t"
    folder.mkdir()
    pq.write_table(
        pa.table({"id": np.arange(len(keys)), "problem_id": keys}), folder / "rows.parquet"
    )
    tbl = cr.open_table(uri(folder))
    builder = cr.PermutationBuilder(tbl).shuffle(seed=2)
    if grouped:
        builder = builder.group_by("problem_id")
    perms = builder.persist(uri(tmp_path / "p"))

    def dataset(rank: int, world: int) -> cr.StreamingDataset:
        return cr.StreamingDataset(
            perms[0],
            global_batch_size=24,
            rank=rank,
            world_size=world,
            epoch=1,
            shuffle_seed=9,
            columns=["id"],
            format="numpy",
        )

    ranks = [steps_of(dataset(r, 3)) for r in range(3)]
    for world in (1, 2, 3):
        ds = dataset(0, world)
        for step in range(ds.steps_per_epoch):
            rows = ds.rows_of_step(step)
            assert rows.dtype == np.uint64
            every_rank = [row for r in ranks for row in r[step]]
            assert sorted(rows.tolist()) == sorted(every_rank)
            if world == 3:  # rank by rank
                assert rows.tolist() == every_rank
            # the rows themselves, from the table (id is the row id)
            assert tbl.take(rows, ["id"])["id"].to_pylist() == rows.tolist()
        assert ds.rows_of_step(0, epoch=0).tolist() != ds.rows_of_step(0).tolist()
        with pytest.raises(cr.InvalidArgumentError, match="step"):
            ds.rows_of_step(ds.steps_per_epoch)
