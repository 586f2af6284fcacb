"""Provenance: the rows of a step (``rows_of_step``) and the rows themselves (``Table.take``)."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path
from typing import Any

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


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def croupier_cli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The croupier command, built once."""
    path = tmp_path_factory.mktemp("bin") / "croupier"
    subprocess.run(
        ["go", "build", "-o", str(path), "./cmd/croupier"], cwd=REPO, check=True, timeout=600
    )
    return path


def deal_steps(cli: Path, state: dict[str, Any], folder: Path, *args: str) -> list[dict[str, Any]]:
    """``croupier deal --checkpoint STATE --steps ...``'s steps, for state."""
    path = folder / "state.json"
    path.write_text(json.dumps(state))
    out = subprocess.run(
        [str(cli), "deal", "--checkpoint", str(path), "--json", *args],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    steps: list[dict[str, Any]] = json.loads(out.stdout)["steps"]
    return steps


def grown(folder: Path, sizes: list[int]) -> str:
    """A croupier table of one version per size; row i has id i."""
    table_uri = uri(folder)
    start = 0
    for v, n in enumerate(sizes):
        rows = pa.table({"id": pa.array(range(start, start + n), pa.int64())})
        if v == 0:
            cr.create_table(table_uri, rows).close()
        else:
            cr.open_table(table_uri).append(rows)
        start += n
    return table_uri


def version_of(sizes: list[int], row: int) -> int:
    """The version of a table grown by ``sizes`` that added ``row``."""
    return int(np.searchsorted(np.cumsum(sizes), row, side="right")) + 1


def test_deal_steps_are_rows_of_step_of_a_permutation(tmp_path: Path, croupier_cli: Path) -> None:
    """``croupier deal --steps`` over a checkpoint of a shuffled run gives, step by
    step, ``rows_of_step``'s rows and the version that added each, in one call:
    by default every step before the checkpoint."""
    sizes = [70, 50, 40]
    tbl = cr.open_table(grown(tmp_path / "t", sizes))
    perms = cr.PermutationBuilder(tbl).shuffle(seed=4).persist(uri(tmp_path / "p"))
    ds = cr.StreamingDataset(perms[0], global_batch_size=12, world_size=2, rank=1,
                             shuffle_seed=5, columns=["id"], format="numpy")  # fmt: skip
    trained = []
    for batch in ds:
        trained.append(batch["id"].tolist())
        if len(trained) == 9:
            break
    state = ds.state_dict()
    for arg, steps in [(":", range(9)), ("2:12", range(2, 12))]:
        dealt = deal_steps(croupier_cli, state, tmp_path, "--world-size", "2", "--steps", arg)
        assert [d["step"] for d in dealt] == list(steps)
        for d in dealt:
            rows = [row for rank in d["ranks"] for row in rank["row_ids"]]
            assert rows == ds.rows_of_step(d["step"]).tolist()
            for rank in d["ranks"]:
                assert rank["versions"] == [version_of(sizes, r) for r in rank["row_ids"]]
            if d["step"] < 9:  # what this rank trained on
                assert d["ranks"][1]["row_ids"] == trained[d["step"]]


def test_deal_steps_are_rows_of_step_of_following(tmp_path: Path, croupier_cli: Path) -> None:
    """The same for a run following a growing table: ``croupier deal --steps``
    over its checkpoint and ``FollowingDataset.rows_of_step`` give the rows of
    each step, rounds and replays included, and the versions the batches carry."""
    sizes = [30, 25, 31, 40, 22]
    table_uri = grown(tmp_path / "t", sizes)
    follow = cr.Follow(rows_per_round=24, replay=3, wait_timeout=0.01, poll_interval=0.001)
    ds = cr.FollowingDataset(table_uri, follow, global_batch_size=8, world_size=2, rank=0,
                             columns=["id"], format="numpy")  # fmt: skip
    trained = []
    for batch in ds:
        trained.append(batch)
        if len(trained) == 7:
            break
    state = ds.state_dict()
    fresh = cr.FollowingDataset(table_uri, follow, global_batch_size=8, columns=["id"])
    dealt = deal_steps(croupier_cli, state, tmp_path, "--world-size", "2", "--steps", ":12")
    assert [d["step"] for d in dealt] == list(range(12))
    for d in dealt:
        rows = [row for rank in d["ranks"] for row in rank["row_ids"]]
        assert rows == ds.rows_of_step(d["step"]).tolist()
        assert sorted(rows) == sorted(fresh.rows_of_step(d["step"]).tolist())  # any world size
        for rank in d["ranks"]:
            assert rank["versions"] == [version_of(sizes, r) for r in rank["row_ids"]]
        if d["step"] < 7:  # what rank 0 trained on, and the versions its batches carried
            assert d["ranks"][0]["row_ids"] == trained[d["step"]]["id"].tolist()
            assert d["ranks"][0]["versions"] == trained[d["step"]]["_version"].tolist()
    assert any(d["round"]["replayed_rows"] for d in dealt)  # replays are provenance too
    with pytest.raises(cr.InvalidArgumentError, match="epoch"):
        ds.rows_of_step(0, epoch=1)
    with pytest.raises(cr.NotFoundError, match="not committed yet"):
        ds.rows_of_step(1000)


def test_mixture_rows_of_step_are_its_slots(tmp_path: Path) -> None:
    """``Mixture.rows_of_step`` gives, slot by slot, the source and the rows a
    mixture step yields, before its position (replayed from the start, across
    the end of an iteration) and after it."""
    sources = []
    for i, n in enumerate([60, 90]):
        folder = tmp_path / f"s{i}"
        folder.mkdir()
        pq.write_table(pa.table({"id": np.arange(n) + 1000 * i}), folder / "rows.parquet")
        perms = (
            cr.PermutationBuilder(cr.open_table(uri(folder)))
            .shuffle(seed=i)
            .persist(uri(tmp_path / f"p{i}"))
        )
        sources.append(cr.StreamingDataset(perms[0], global_batch_size=6, columns=["id"],
                                           format="numpy"))  # fmt: skip
    mix = cr.Mixture([(sources[0], 0.4), (sources[1], 0.6)], seed=3, slots=2)

    def taken(steps: Any) -> list[list[tuple[int, list[int]]]]:
        return [[(s, batch["id"].tolist()) for s, batch in step] for step in steps]

    yielded = taken(mix)  # the first iteration, to its end
    first = len(yielded)
    yielded += taken(itertools.islice(mix, 3))  # and the next one's first steps
    assert 0 < first < len(yielded) == first + 3

    def rows_of(step: int) -> list[tuple[int, list[int]]]:
        return [(s, (rows + 1000 * s).tolist()) for s, rows in mix.rows_of_step(step)]

    assert [rows_of(step) for step in range(len(yielded))] == yielded
    ahead = rows_of(len(yielded))
    assert taken(itertools.islice(mix, 1)) == [ahead]
