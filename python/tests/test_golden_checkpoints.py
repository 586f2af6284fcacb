"""Golden checkpoints (python/tests/golden/README.md): every kind of state dict a
run can hold today, as this croupier wrote it, still loads into a fresh dataset at
another world size and continues with exactly the steps recorded beside it.

The fixture is written afresh by each run, the same rows, row groups,
permutations and appends every time. What ties a state dict to where and when
its fixture was written (the fixture's folder in ``table_uri`` and
``permutation_uri``, the permutations' UUIDs, which hash their table's pin, and
``table_id``, ``table_version`` and a following position's ``head``, which
hash files and modification times) is moved onto the fresh fixture
(:func:`relocate`); every other field is loaded as it was written.

``CROUPIER_REGEN_GOLDEN=1`` writes the golden files again instead of checking
them; plain runs never do.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import multiprocessing
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

import croupier as cr

GOLDEN = Path(__file__).parent / "golden"
REGEN = os.environ.get("CROUPIER_REGEN_GOLDEN") == "1"

# The plain Parquet table: ids 0 .. 239 in two files, row groups of 16 rows.
TABLE_FILES = (150, 90)
ROW_GROUP = 16
# The croupier table followed: version 1 and each append hold 30 rows; the
# golden state dict is taken after FOLLOW_BEFORE versions, the steps after it
# are read once the others have landed.
FOLLOW_ROWS, FOLLOW_BEFORE, FOLLOW_VERSIONS = 30, 3, 6
# Fields whose values hash the fixture's files (or, for a plain table's
# version, their modification times), and torchdata's seed of a run: taken
# from the fresh run's state dict.
HASHED = frozenset({"table_id", "table_version", "head", "_base_seed"})


def rows(start: int, n: int) -> pa.Table:
    """Rows ``start .. start+n`` of the fixture; every value is derived from ``id``.

    ``prompt`` gathers four consecutive ids (for ``group_by``); ``tokens`` holds
    1 to 11 values (for token-budget steps).
    """
    ids = np.arange(start, start + n, dtype=np.int64)
    tokens = [list(range(3 * i, 3 * i + (7 * i) % 11 + 1)) for i in ids.tolist()]
    return pa.table(
        {
            "id": pa.array(ids),
            "prompt": pa.array(ids // 4),
            "tokens": pa.array(tokens, type=pa.list_(pa.int32())),
        }
    )


@dataclasses.dataclass
class Fixture:
    """The tables and permutations the golden runs deal, under ``root``."""

    root: Path
    table: cr.Table
    perms: dict[str, cr.Permutations]
    follow_uri: str

    @property
    def uri(self) -> str:
        return "file://" + str(self.root)


def build_fixture(root: Path, follow_versions: int = FOLLOW_VERSIONS) -> Fixture:
    root = root.resolve()
    folder = root / "table"
    folder.mkdir(parents=True)
    start = 0
    for i, n in enumerate(TABLE_FILES):
        pq.write_table(rows(start, n), folder / f"part-{i:05d}.parquet", row_group_size=ROW_GROUP)
        start += n
    table = cr.open_table(folder)
    builders = {
        # rows kept in a split by a hash of their id, then shuffled
        "split": cr.PermutationBuilder(table)
        .split_hash(["id"], [3, 1], split_names=["train", "val"])
        .shuffle(seed=11),
        "tokens": cr.PermutationBuilder(table).lengths("tokens").shuffle(seed=7),
        "groups": cr.PermutationBuilder(table).group_by("prompt").shuffle(seed=9),
    }
    perms = {name: b.persist(root / f"perm-{name}", progress=False) for name, b in builders.items()}
    follow_uri = "file://" + str(root / "follow")
    cr.create_table(follow_uri, rows(0, FOLLOW_ROWS), row_group_rows=ROW_GROUP)
    append_versions(follow_uri, 2, follow_versions)
    return Fixture(root, table, perms, follow_uri)


def append_versions(follow_uri: str, first: int, last: int) -> None:
    """Append versions ``first .. last`` of the followed table."""
    table = cr.open_table(follow_uri)
    for v in range(first, last + 1):
        table.append(rows(FOLLOW_ROWS * (v - 1), FOLLOW_ROWS))


# -- the kinds of checkpoint ---------------------------------------------------------

Make = Callable[[Fixture, int, int], Any]  # (fixture, rank, world size) -> dataset


def streaming(source: Callable[[Fixture], Any], **kwargs: Any) -> Make:
    def make(f: Fixture, rank: int, world: int) -> cr.StreamingDataset:
        return cr.StreamingDataset(source(f), columns=["id"], rank=rank, world_size=world, **kwargs)

    return make


# split 'train' of the hash split, shuffled, G=8 S=4: the dataset of several cases
SPLIT = streaming(
    lambda f: f.perms["split"]["train"], global_batch_size=8, num_splits=4, shuffle_seed=3
)


def mixture(f: Fixture, rank: int, world: int) -> cr.Mixture:
    web = streaming(lambda f: f.table, global_batch_size=8, num_splits=4, shuffle_seed=1)
    code = streaming(lambda f: f.perms["split"]["train"], global_batch_size=4, shuffle_seed=2)
    return cr.Mixture(
        [(web(f, rank, world), 2), (code(f, rank, world), 1)],
        seed=4,
        schedule=[(12, [1, 3])],
        on_exhausted="cycle",
        slots=2,
    )


def following(rule: dict[str, Any], **kwargs: Any) -> Make:
    def make(f: Fixture, rank: int, world: int) -> cr.FollowingDataset:
        follow = cr.Follow(**rule, wait_timeout=0.05, poll_interval=0.001)
        return cr.FollowingDataset(
            f.follow_uri, follow, shuffle_seed=6, columns=["id"], rank=rank, world_size=world,
            **kwargs,
        )  # fmt: skip

    make.follows = True  # type: ignore[attr-defined]
    return make


def format1(state: dict[str, Any]) -> dict[str, Any]:
    """A StreamingDataset's state dict of format 1: no table_id, no permutation_uri."""
    drop = ("table_id", "permutation_uri")
    return {**{k: v for k, v in state.items() if k not in drop}, "format": 1}


@dataclasses.dataclass(frozen=True)
class Case:
    """A golden checkpoint: ``make``'s dataset at world size 1 after ``before``
    steps (taken through ``loader`` with ``workers`` worker processes when not
    0: ``"croupier"``'s DataLoader or torchdata's ``"stateful"``
    StatefulDataLoader, which reads it again), and its next ``after`` steps, read
    again at world size ``resume_world``. ``legacy`` turns the state dict into
    one of an older format, which loads but is no longer written."""

    about: str
    make: Make
    before: int
    after: int
    resume_world: int
    workers: int = 0
    loader: str = "croupier"
    legacy: Callable[[dict[str, Any]], dict[str, Any]] | None = None


CASES = {
    "streaming-table": Case(
        "StreamingDataset over a table in row order (no permutation), G=8 S=4; the "
        "steps after it cross into epoch 1",
        streaming(lambda f: f.table, global_batch_size=8, num_splits=4, shuffle_seed=5),
        before=27, after=6, resume_world=2,
    ),
    "streaming-split": Case(
        "StreamingDataset over split 'train' of a hash split, shuffled, G=8 S=4 (23 "
        "steps an epoch); the steps after it cross into epoch 1, shuffled by shuffle_seed",
        SPLIT,
        before=20, after=6, resume_world=4,
    ),
    "streaming-workers": Case(
        "the dataset of streaming-split, its state dict taken from croupier.DataLoader "
        "with 2 worker processes (in_process=False)",
        SPLIT,
        before=5, after=6, resume_world=2, workers=2,
    ),
    "streaming-tokens": Case(
        "StreamingDataset of token-budget steps (tokens_per_step=40) over a permutation "
        "with lengths, taken in epoch 1 (epoch 0 has 39 steps, epoch 1 40)",
        streaming(lambda f: f.perms["tokens"]["all"], tokens_per_step=40, shuffle_seed=2),
        before=41, after=5, resume_world=3,
    ),
    "streaming-groups": Case(
        "StreamingDataset over a permutation grouped by 'prompt' (groups of 4), G=8 S=4 "
        "(30 steps an epoch); the steps after it cross into epoch 1",
        streaming(lambda f: f.perms["groups"]["all"], global_batch_size=8, num_splits=4,
                  shuffle_seed=8),
        before=28, after=5, resume_world=2,
    ),
    "streaming-stateful": Case(
        "the dataset of streaming-split in torchdata's StatefulDataLoader with 2 worker "
        "processes: its state dict holds each worker's (worker_position: true)",
        SPLIT,
        before=5, after=6, resume_world=2, workers=2, loader="stateful",
    ),
    "streaming-format1": Case(
        "the state dict of streaming-split in format 1 (no table_id, no permutation_uri), "
        "which binds its table by table_uri",
        SPLIT,
        before=5, after=6, resume_world=2, legacy=format1,
    ),
    "mixture": Case(
        "Mixture of the table (weight 2) and split 'train' (weight 1), 2 slots, a "
        "schedule point at step 12, on_exhausted='cycle': its sources in their epoch 1",
        mixture, before=40, after=6, resume_world=2,
    ),
    "follow": Case(
        f"FollowingDataset (rows_per_round=24, replay=2) of a croupier table of "
        f"{FOLLOW_ROWS} rows a version, taken when versions 1 to {FOLLOW_BEFORE} were "
        f"committed; the steps after it read once versions up to {FOLLOW_VERSIONS} landed",
        following({"rows_per_round": 24, "replay": 2}, global_batch_size=8, num_splits=4),
        before=5, after=6, resume_world=2,
    ),
    "follow-tokens": Case(
        "FollowingDataset of token-budget steps (tokens_per_step=40) of whole groups "
        "(group_by='prompt', lengths='tokens', rows_per_round=24, replay=0.25), over "
        "the appends of follow",
        following({"rows_per_round": 24, "replay": 0.25, "group_by": "prompt",
                   "lengths": "tokens"}, tokens_per_step=40),
        before=6, after=6, resume_world=2,
    ),
}  # fmt: skip


# -- reading steps -------------------------------------------------------------------


def step_rows(item: Any) -> Any:
    """What a step holds, as the golden files record it: its sorted row ids, or for
    a mixture each slot's source and sorted row ids."""
    if isinstance(item, list):
        return [[source, sorted(batch["id"].tolist())] for source, batch in item]
    return sorted(item["id"].tolist())


def merge(ranks: list[Any]) -> Any:
    """One step of every rank as one: the union of their rows, slot by slot."""
    if isinstance(ranks[0][0], list):
        return [
            [slots[0][0], sorted(itertools.chain(*(ids for _, ids in slots)))]
            for slots in zip(*ranks, strict=True)
        ]
    return sorted(itertools.chain(*ranks))


def steps(ds: Any, n: int) -> Iterator[Any]:
    """The next ``n`` steps of ``ds``, iteration after iteration (a new epoch,
    new versions of a followed table), as :func:`step_rows` has them."""
    taken = 0
    while taken < n:
        before = taken
        for item in ds:
            yield step_rows(item)
            taken += 1
            if taken == n:
                return
        if taken == before:
            raise AssertionError(f"the dataset ended after {taken} of {n} steps")


def loader(case: Case, ds: Any) -> Any:
    """The loader a case's state dict is taken through, or None."""
    if not case.workers:
        return None
    if case.loader == "stateful":
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["torch", "croupier"])  # workers start in moments
        return StatefulDataLoader(
            ds, batch_size=None, num_workers=case.workers, multiprocessing_context=context
        )
    return cr.DataLoader(ds, num_workers=case.workers, in_process=False)


def run(
    case: Case, f: Fixture, total: int, between: Callable[[], None] | None = None
) -> tuple[dict[str, Any], list[Any]]:
    """One uninterrupted run at world size 1 (through the case's loader): its
    state dict after ``case.before`` steps, where ``between`` is called, and its
    first ``total`` steps."""
    ds = case.make(f, 0, 1)
    loader_ = loader(case, ds)
    items = (step_rows(b) for b in loader_) if loader_ is not None else steps(ds, total)
    state: dict[str, Any] = {}
    taken: list[Any] = []
    for item in items:
        taken.append(item)
        if len(taken) == case.before:
            state = json.loads(json.dumps((loader_ or ds).state_dict()))
            if between is not None:
                between()
        if len(taken) == total:
            break
    assert len(taken) == total, f"the run ended after {len(taken)} of {total} steps"
    return state, taken


def resumed_steps(case: Case, f: Fixture, state: dict[str, Any]) -> list[Any]:
    """The ``case.after`` steps from ``state``, read on every rank of
    ``case.resume_world`` and merged."""
    per_rank = []
    for rank in range(case.resume_world):
        ds = case.make(f, rank, case.resume_world)
        if case.loader == "stateful":  # its state dict is torchdata's, read by torchdata
            resumed = loader(case, ds)
            resumed.load_state_dict(json.loads(json.dumps(state)))
            items = (step_rows(b) for b in resumed)
            per_rank.append(list(itertools.islice(items, case.after)))
            continue
        ds.load_state_dict(json.loads(json.dumps(state)))
        per_rank.append(list(steps(ds, case.after)))
    return [merge(list(ranks)) for ranks in zip(*per_rank, strict=True)]


# -- moving a state dict onto a fresh fixture ----------------------------------------


def fixture_record(f: Fixture) -> dict[str, Any]:
    return {"root": f.uri, "permutations": {name: p.id for name, p in f.perms.items()}}


def relocate(value: Any, fresh: Any, was: dict[str, Any], now: dict[str, Any]) -> Any:
    """``value`` (a golden state dict) moved from the fixture ``was`` onto the
    fixture ``now`` (:func:`fixture_record`): URIs under the old root under the
    new one, old permutation UUIDs the new ones, and the HASHED fields the
    values ``fresh`` (the fresh run's state dict) has at the same place."""
    if isinstance(value, dict):
        out = {}
        for key, v in value.items():
            there = fresh.get(key) if isinstance(fresh, dict) else None
            out[key] = (
                there if key in HASHED and there is not None else relocate(v, there, was, now)
            )
        return out
    if isinstance(value, list):
        theirs = fresh if isinstance(fresh, list) else []
        return [
            relocate(v, theirs[i] if i < len(theirs) else None, was, now)
            for i, v in enumerate(value)
        ]
    if isinstance(value, str):
        if value == was["root"] or value.startswith(was["root"] + "/"):
            value = now["root"] + value[len(was["root"]) :]
        for name, uuid in was["permutations"].items():
            value = value.replace(uuid, now["permutations"][name])
    return value


# -- the golden files ----------------------------------------------------------------


def dumps(value: Any, indent: str = "") -> str:
    """JSON with a dict's keys one a line and a list without dicts on one line."""
    inner = indent + "  "
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(k)}: {dumps(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        return "[\n" + ",\n".join(inner + dumps(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(value)


def write_golden(path: Path, golden: dict[str, Any]) -> None:
    """A golden file, one step a line."""
    head = dumps({k: v for k, v in golden.items() if k != "next_steps"})[:-2]
    lines = ",\n    ".join(json.dumps(s) for s in golden["next_steps"])
    path.write_text(head + ',\n  "next_steps": [\n    ' + lines + "\n  ]\n}\n")


def regenerate(name: str, case: Case, tmp: Path) -> None:
    """Write the golden file of ``case`` from a run over a new fixture; a file
    no longer ``current`` (of an older format) is kept as it is."""
    path = GOLDEN / f"{name}.json"
    if case.legacy is None and path.exists() and not json.loads(path.read_text())["current"]:
        pytest.skip(f"{path.name} is of an older format: kept as it is")
    between = None
    if getattr(case.make, "follows", False):  # versions after FOLLOW_BEFORE land later
        f = build_fixture(tmp / "fixture", FOLLOW_BEFORE)
        between = lambda: append_versions(f.follow_uri, FOLLOW_BEFORE + 1, FOLLOW_VERSIONS)  # noqa: E731
    else:
        f = build_fixture(tmp / "fixture")
    state, taken = run(case, f, case.before + case.after, between)
    write_golden(
        path,
        {
            "about": case.about,
            "written_by": cr.__version__,
            "current": case.legacy is None,
            "fixture": fixture_record(f),
            "steps_before": case.before,
            "resume_world_size": case.resume_world,
            "state_dict": state if case.legacy is None else case.legacy(state),
            "next_steps": taken[case.before :],
        },
    )


@pytest.fixture(scope="module")
def fixture(tmp_path_factory: pytest.TempPathFactory) -> Fixture:
    return build_fixture(tmp_path_factory.mktemp("golden") / "fixture")


def test_every_kind_has_a_golden_file() -> None:
    if REGEN:
        pytest.skip("writing the golden files")
    names = {p.stem for p in GOLDEN.glob("*.json")}
    assert names >= set(CASES), f"golden files missing: {sorted(set(CASES) - names)}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_checkpoint(name: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The golden state dict, moved onto the fresh fixture, loads at another world
    size and deals exactly the recorded steps; and today's run writes the same dict
    (for a golden file of the current format)."""
    case = CASES[name]
    if REGEN:
        regenerate(name, case, tmp_path)
        return
    f: Fixture = request.getfixturevalue("fixture")
    golden = json.loads((GOLDEN / f"{name}.json").read_text())
    fresh, _ = run(case, f, case.before)
    state = relocate(golden["state_dict"], fresh, golden["fixture"], fixture_record(f))
    assert resumed_steps(case, f, state) == golden["next_steps"]
    if golden["current"]:
        # Key for key, in order, and value for value: a change of the format
        # needs new golden files. A whole number may be written with or without
        # a fraction (0.0 by Python, 0 by Go: JSON numbers either way).
        assert keys_in_order(state) == keys_in_order(fresh), (
            f"{name}: this croupier writes the keys of its state dict in another order"
        )
        assert state == fresh, (
            f"{name}: this croupier writes another state dict after "
            f"{case.before} steps than the golden file holds (see golden/README.md)"
        )


def keys_in_order(value: Any) -> Any:
    """The keys of every dict in ``value``, nested, in their order."""
    if isinstance(value, dict):
        return [(k, keys_in_order(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [keys_in_order(v) for v in value]
    return None


def test_relocate_keeps_what_is_not_an_identity() -> None:
    was = {"root": "file:///a/fixture", "permutations": {"split": "u-1"}}
    now = {"root": "file:///b/fixture", "permutations": {"split": "u-2"}}
    golden = {"permutation_id": "u-1/train", "table_uri": "file:///a/fixture/table",
              "table_id": "t1", "epoch": 2, "position": {"head": "h1", "carry": [1, 2]},
              "other": "file:///a/fixture2"}  # fmt: skip
    fresh = {"table_id": "t2", "epoch": 3, "position": {"head": "h2", "carry": [5]}}
    assert relocate(golden, fresh, was, now) == {
        "permutation_id": "u-2/train",
        "table_uri": "file:///b/fixture/table",
        "table_id": "t2",
        "epoch": 2,
        "position": {"head": "h2", "carry": [1, 2]},
        "other": "file:///a/fixture2",
    }
