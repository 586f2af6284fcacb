"""Checkpoints (docs/concepts.md): stop, save, resume at another world size or worker count."""

from __future__ import annotations

import json
from typing import Any

import pytest
import spec_reference as ref
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
    assert states[0]["format"] == 1
    assert first + resume_steps(tbl, states[0], world_size=3) == expected


def test_resume_from_workers(table_uri: str, expected: list[set[int]]) -> None:
    tbl = cr.open_table(table_uri)
    ds = dataset(tbl)
    loader = cr.DataLoader(ds, num_workers=2)
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
        ("table_uri", "file:///elsewhere"),
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
        ds.load_state_dict({**ds.state_dict(), "format": 2})
    with pytest.raises(cr.InvalidArgumentError, match="steps_consumed"):
        ds.load_state_dict({**ds.state_dict(), "steps_consumed": -1})
