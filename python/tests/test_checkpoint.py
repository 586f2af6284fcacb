"""Checkpoints (docs/concepts.md): stop, save, resume at another world size or worker count."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import spec_reference as ref
from conftest import rows, uri, write_files
from torchdata.stateful_dataloader import StatefulDataLoader

import croupier as cr

G, S = 24, 12


def dataset(tbl: cr.Table, **kwargs: Any) -> cr.StreamingDataset:
    return cr.StreamingDataset(
        tbl, global_batch_size=G, num_splits=S, columns=["id"], drop_last=False, **kwargs
    )


def roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(state))


def resume_steps(tbl: cr.Table, state: dict[str, Any], world_size: int) -> list[set[int]]:
    """The rest of the epoch from ``state``, on every rank of ``world_size``, per step."""
    per_rank = []
    for r in range(world_size):
        ds = dataset(tbl, rank=r, world_size=world_size)
        ds.load_state_dict(state)
        per_rank.append([set(b["id"].tolist()) for b in ds])
    return [set().union(*step) for step in zip(*per_rank, strict=True)]


@pytest.fixture
def expected(num_rows: int) -> list[set[int]]:
    return ref.global_steps(list(range(num_rows)), S, G, drop_last=False)


def test_resume_at_another_world_size(table_uri: str, expected: list[set[int]]) -> None:
    tbl = cr.open_table(table_uri)
    stop = 10
    first: list[set[int]] = [set() for _ in range(stop)]
    states = []
    for r in range(2):  # world size 2, each rank stops after `stop` steps
        ds = dataset(tbl, rank=r, world_size=2)
        for t, batch in enumerate(ds):
            first[t] |= set(batch["id"].tolist())
            if t + 1 == stop:
                break
        states.append(roundtrip(ds.state_dict()))
    assert states[0] == states[1]  # identical on every rank
    assert states[0]["steps_consumed"] == stop
    assert states[0]["epoch"] == 0
    assert states[0]["format"] == 2
    assert first + resume_steps(tbl, states[0], world_size=3) == expected


def test_resume_from_workers(table_uri: str, expected: list[set[int]]) -> None:
    tbl = cr.open_table(table_uri)
    ds = dataset(tbl)
    loader = cr.DataLoader(ds, num_workers=2, in_process=False)
    first = []
    for batch in loader:
        first.append(set(batch["id"].tolist()))
        assert loader.state_dict()["steps_consumed"] == len(first)  # exact after every batch
        if len(first) == 7:
            break
    state = roundtrip(loader.state_dict())
    assert state == ds.state_dict()
    del loader
    assert first + resume_steps(tbl, state, world_size=4) == expected


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader(table_uri: str, expected: list[set[int]], num_workers: int) -> None:
    tbl = cr.open_table(table_uri)
    options: dict[str, Any] = {"batch_size": None, "num_workers": num_workers}
    if num_workers:
        options["multiprocessing_context"] = "spawn"
    loader = StatefulDataLoader(dataset(tbl), **options)
    first = []
    for batch in loader:
        first.append(set(batch["id"].tolist()))
        if len(first) == 5:
            break
    state = loader.state_dict()
    del loader
    resumed = StatefulDataLoader(dataset(tbl), **options)
    resumed.load_state_dict(state)
    assert first + [set(b["id"].tolist()) for b in resumed] == expected


def test_end_of_epoch_resumes_at_next_epoch(table_uri: str) -> None:
    tbl = cr.open_table(table_uri)
    ds = dataset(tbl)
    n = sum(1 for _ in ds)
    assert n == ds.steps_per_epoch
    state = ds.state_dict()
    assert (state["epoch"], state["steps_consumed"]) == (1, 0)
    fresh = dataset(tbl)
    fresh.load_state_dict(state)
    assert fresh.epoch == 1
    assert sum(1 for _ in fresh) == fresh.steps_per_epoch


def test_set_epoch_keeps_a_resumed_position(table_uri: str) -> None:
    tbl = cr.open_table(table_uri)
    ds = dataset(tbl)
    ds.load_state_dict({**ds.state_dict(), "epoch": 2, "steps_consumed": 5})
    ds.set_epoch(2)
    assert (ds.epoch, ds.steps_consumed) == (2, 5)
    ds.set_epoch(3)
    assert (ds.epoch, ds.steps_consumed) == (3, 0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("global_batch_size", 48),
        ("num_splits", 6),
        ("shuffle_seed", 7),
        ("table_version", "some-other-version"),
        ("table_id", "t0000000000000000"),
        ("permutation_id", "00000000-0000-0000-0000-000000000000"),
    ],
)
def test_mismatched_state_dict(table_uri: str, field: str, value: Any) -> None:
    ds = dataset(cr.open_table(table_uri))
    state = ds.state_dict()
    with pytest.raises(cr.InvalidArgumentError, match=field) as info:
        ds.load_state_dict({**state, field: value})
    assert str(value) in str(info.value)
    assert str(state[field]) in str(info.value)


def test_bad_state_dict_format(table_uri: str) -> None:
    ds = dataset(cr.open_table(table_uri))
    with pytest.raises(cr.InvalidArgumentError, match="format"):
        ds.load_state_dict({**ds.state_dict(), "format": 3})
    with pytest.raises(cr.InvalidArgumentError, match="steps_consumed"):
        ds.load_state_dict({**ds.state_dict(), "steps_consumed": -1})


def test_unknown_state_dict_key(table_uri: str) -> None:
    ds = dataset(cr.open_table(table_uri))
    state = ds.state_dict()
    steps = state.pop("steps_consumed")
    want = re.escape('"stepz_consumed" (did you mean "steps_consumed"?)')
    with pytest.raises(cr.InvalidArgumentError, match=want):
        ds.load_state_dict({**state, "stepz_consumed": steps})


def test_checkpoints_travel(tmp_path: Path) -> None:
    """A checkpoint names its table by the files it pinned, not by a URI string: it
    resumes through another spelling of the URI and in a copy of a croupier table;
    it records where its permutation lives; versions may be ints or strings."""
    tbl = cr.create_table(uri(tmp_path / "t"), rows(0, 240))
    perms = cr.PermutationBuilder(tbl).shuffle(seed=3).persist(uri(tmp_path / "p"))
    ds = dataset(perms[0])
    next(iter(ds))
    ds._set_position(0, 4)
    state = roundtrip(ds.state_dict())
    assert state["permutation_uri"] == perms.uri
    assert state["table_id"].startswith("t")
    assert state["table_version"] == "1"
    assert roundtrip(dataset(tbl).state_dict())["permutation_uri"] is None

    def resumes(table: cr.Table, state: dict[str, Any], **kwargs: Any) -> int:
        other = dataset(table)
        other.load_state_dict(state, **kwargs)
        return other.steps_consumed

    shutil.copytree(tmp_path / "t", tmp_path / "copy")
    table_state = {**roundtrip(dataset(tbl).state_dict()), "steps_consumed": 4}
    for spelling in (uri(tmp_path / "t") + "/", "file://" + str(tmp_path) + "/./t"):
        assert resumes(cr.open_table(spelling), table_state) == 4
    assert resumes(cr.open_table(uri(tmp_path / "copy")), table_state) == 4
    assert resumes(cr.open_table(tbl.uri, version="1"), {**table_state, "table_version": 1}) == 4

    # Format 1 (no table_id) binds the URI; table_moved=True is the explicit override.
    old = {k: v for k, v in table_state.items() if k not in ("table_id", "permutation_uri")}
    old["format"] = 1
    assert resumes(tbl, old) == 4
    moved = cr.open_table(uri(tmp_path / "copy"))
    with pytest.raises(cr.InvalidArgumentError, match=r"table_uri .*table_moved"):
        resumes(moved, old)
    assert resumes(moved, old, table_moved=True) == 4
    loader = cr.DataLoader(dataset(moved))  # passes the override on
    loader.load_state_dict(old, table_moved=True)
    assert loader.dataset.steps_consumed == 4

    # A copied plain dataset has new modification times, so a new version: only
    # the override resumes it, and only when its files are the same.
    write_files(tmp_path / "plain", [120, 120])
    plain = cr.open_table(uri(tmp_path / "plain"))
    shutil.copytree(tmp_path / "plain", tmp_path / "plain2", copy_function=shutil.copy)
    plain_state = {**roundtrip(dataset(plain).state_dict()), "steps_consumed": 2}
    copy = cr.open_table(uri(tmp_path / "plain2"))
    assert copy.version != plain.version
    with pytest.raises(cr.InvalidArgumentError, match="table_version"):
        resumes(copy, plain_state)
    assert resumes(copy, plain_state, table_moved=True) == 2
    with pytest.raises(cr.InvalidArgumentError, match="table_id"):
        resumes(tbl, plain_state, table_moved=True)


GO_CHECKPOINTS = Path(__file__).resolve().parents[2] / "loader" / "testdata"


@pytest.mark.parametrize("source", ["split", "table"])
def test_state_dict_is_what_go_reads(table_uri: str, tmp_path: Path, source: str) -> None:
    """A state dict has the keys, in order, and the JSON types of the checkpoints that Go's
    loader.Checkpoint reads and writes (loader/testdata, checked by
    loader/TestCheckpointJSONIsPythons), so a Go service and a trainer share checkpoints."""
    tbl = cr.open_table(table_uri)
    if source == "split":
        perm = uri(tmp_path / "perm")
        cr.PermutationBuilder(tbl).shuffle(seed=7).persist(perm)
        ds = dataset(cr.open_permutations(perm)["all"], shuffle_seed=3)
    else:
        ds = dataset(tbl)
    for t, _ in enumerate(ds):
        if t == 2:
            break
    mine = roundtrip(ds.state_dict())
    go = json.loads((GO_CHECKPOINTS / f"checkpoint-{source}.json").read_text())
    assert list(mine) == list(go)
    assert {k: type(v) for k, v in mine.items()} == {k: type(v) for k, v in go.items()}
    assert mine["steps_consumed"] == 3
