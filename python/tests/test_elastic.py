"""Elastic determinism (docs/concepts.md) with shuffled permutations, later epochs,
other world sizes and real DataLoader worker processes.

Everything is compared with spec_reference.py: a plain-Python statement of the
dealing order, and a second implementation of the epoch orders of shuffled
splits. Worker k of K is checked two ways: through the Go stream of that worker
in this process, and with real ``spawn``/``forkserver`` worker processes (each
costs seconds, so there are few of those).
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import spec_reference as ref
import torch.utils.data
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torchdata.stateful_dataloader import StatefulDataLoader

import croupier as cr
from croupier import _lib

ROWS = 400  # rows of the small table; row id = the ``id`` column
BIG_ROWS = 2 * 65536 + 5000  # two full epoch blocks and a partial one
KINDS = ("plain", "shuffled", "clump3")
SHUFFLE = {"plain": None, "shuffled": (11, None), "clump3": (12, 3)}

pytestmark = pytest.mark.filterwarnings(
    "ignore:This DataLoader will create .* worker processes:UserWarning"
)


# ---------------------------------------------------------------------------
# Tables, permutations and what the reference says about them


def write_id_table(folder: Path, num_rows: int, files: int) -> str:
    """A plain Parquet table whose ``id`` column is the row id (consecutive files)."""
    folder.mkdir(parents=True)
    bounds = np.linspace(0, num_rows, files + 1).astype(int)
    for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        ids = np.arange(lo, hi, dtype=np.int64)
        pq.write_table(pa.table({"id": ids}), folder / f"part-{i:05d}.parquet", row_group_size=97)
    return "file://" + str(folder.resolve())


class Perms:
    """Permutations of one table, built on first use and kept for the module."""

    def __init__(self, root: Path, table_uri: str) -> None:
        self.root = root
        self.table = cr.open_table(table_uri)
        self._cache: dict[tuple[int, str], cr.Permutation] = {}

    def get(self, kind: str, m: int | None = None) -> cr.Permutation:
        """Split "all" of the rows with ``id < m``, shuffled as ``kind`` says."""
        m = self.table.num_rows if m is None else m
        if (m, kind) not in self._cache:
            builder = cr.PermutationBuilder(self.table)
            if m < self.table.num_rows:
                builder = builder.filter(f"id < {m}")
            if SHUFFLE[kind] is not None:
                seed, clump = SHUFFLE[kind]
                builder = builder.shuffle(seed=seed, clump_size=clump)
            uri = "file://" + str(self.root / f"perm-{kind}-{m}")
            perm = builder.persist(uri, progress=False)[0]
            assert len(perm) == m
            self._cache[m, kind] = perm
        return self._cache[m, kind]


@pytest.fixture(scope="module")
def perms(tmp_path_factory: pytest.TempPathFactory) -> Perms:
    root = tmp_path_factory.mktemp("elastic")
    return Perms(root, write_id_table(root / "table", ROWS, files=3))


@pytest.fixture(scope="module")
def big_perms(tmp_path_factory: pytest.TempPathFactory) -> Perms:
    root = tmp_path_factory.mktemp("elastic-big")
    return Perms(root, write_id_table(root / "table", BIG_ROWS, files=2))


@functools.cache
def stored_order(perm: cr.Permutation) -> tuple[int, ...]:
    """order_0: the persisted order of the split."""
    return tuple(int(i) for i in perm.row_ids(0, len(perm)))


@functools.cache
def order(perm: cr.Permutation, seed: int, epoch: int) -> tuple[int, ...]:
    """The reference order_e of a split under a run's shuffle seed."""
    spec = perm.provenance.get("shuffle")
    clump = spec.get("clump_size") if spec else None
    return tuple(ref.epoch_order(stored_order(perm), spec is not None, clump, seed, epoch))


def multiset(ids: list[int]) -> list[int]:
    return sorted(ids)


def expected_steps(
    perm: cr.Permutation, s: int, g: int, seed: int, epoch: int, drop_last: bool
) -> list[list[int]]:
    """The uninterrupted run's global steps, each as a sorted list of ids."""
    batches = ref.rank_batches(order(perm, seed, epoch), s, g, 1, 0, drop_last)
    return [multiset(b) for b in batches]


def ids_of(batch: Any) -> list[int]:
    column = batch.column("id") if isinstance(batch, pa.RecordBatch) else batch["id"]
    return [int(i) for i in np.asarray(column)]


def dataset(perm: cr.Permutation, **kwargs: Any) -> cr.StreamingDataset:
    options: dict[str, Any] = {"global_batch_size": 24, "num_splits": 12, "format": "numpy"}
    options.update(kwargs)
    return cr.StreamingDataset(perm, columns=["id"], **options)


def worker_stream(
    ds: cr.StreamingDataset, epoch: int, start: int, worker: int, num_workers: int
) -> Iterator[tuple[int, list[int]]]:
    """``(step, ids)`` of the Go stream worker ``worker`` of ``num_workers`` would read."""
    options = {"epoch": epoch, "start_step": start, "worker": worker, "num_workers": num_workers}
    stream = _lib.stream_open(ds._handle(), options)
    try:
        while (item := _lib.stream_next(stream.value)) is not None:
            yield item[0], ids_of(item[2])
    finally:
        stream.close()


def as_if_loader(ds: cr.StreamingDataset, num_workers: int) -> list[list[int]]:
    """The batches a DataLoader with ``num_workers`` workers yields from the dataset's
    position: each worker's stream, taken in round robin as torch does."""
    epoch, start = ds.epoch, ds.steps_consumed
    streams = [worker_stream(ds, epoch, start, k, num_workers) for k in range(max(num_workers, 1))]
    out = []
    for i in range(ds.steps_per_epoch - start):
        step, ids = next(streams[i % len(streams)])
        assert step == start + i
        out.append(ids)
    for stream in streams:
        assert next(stream, None) is None
    return out


# ---------------------------------------------------------------------------
# The reference itself


def test_reference_matches_go_golden_values() -> None:
    # the golden values of permutation/random_test.go
    assert ref.derive_key(0, "shuffle") == 0x0E8C835D9BF1FE7A
    assert ref.derive_key(1234, "epoch/1") == 0x8E8B436F2A420BF0
    bijection = ref.Bijection(10, ref.derive_key(1, "epoch/1/blocks"))
    assert [bijection(i) for i in range(10)] == [9, 3, 7, 2, 8, 4, 0, 5, 1, 6]
    for n in (1, 2, 3, 5, 17, 64, 1000):
        bijection = ref.Bijection(n, 99)
        assert sorted(bijection(i) for i in range(n)) == list(range(n))


# ---------------------------------------------------------------------------
# Property: the Go core deals what the reference says, for any parameters


@dataclass(frozen=True)
class Case:
    m: int
    s: int
    g: int
    w: int
    rank: int
    num_workers: int
    worker: int
    start: int
    seed: int
    epoch: int
    kind: str
    drop_last: bool


@st.composite
def cases(draw: st.DrawFn) -> Case:
    m = draw(st.integers(1, ROWS))
    s = draw(st.integers(1, min(m, 24)) | st.just(m))
    g = s * draw(st.integers(1, 4))
    w = draw(st.sampled_from([d for d in range(1, s + 1) if s % d == 0]))
    drop_last = draw(st.booleans())
    steps = ref.steps_per_epoch(m, s, g, drop_last)
    assume(steps > 0)
    num_workers = draw(st.integers(0, 3))
    return Case(
        m=m,
        s=s,
        g=g,
        w=w,
        rank=draw(st.integers(0, w - 1)),
        num_workers=num_workers,
        worker=draw(st.integers(0, max(num_workers, 1) - 1)),
        start=draw(st.integers(0, steps)),
        seed=draw(st.sampled_from([0, 1, 2**64 - 1]) | st.integers(0, 2**64 - 1)),
        epoch=draw(st.integers(0, 3)),
        kind=draw(st.sampled_from(KINDS)),
        drop_last=drop_last,
    )


@settings(
    derandomize=True,
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases())
def test_go_deals_like_the_reference(perms: Perms, case: Case) -> None:
    perm = perms.get(case.kind, case.m)
    ds = dataset(
        perm,
        global_batch_size=case.g,
        num_splits=case.s,
        rank=case.rank,
        world_size=case.w,
        shuffle_seed=case.seed,
        epoch=case.epoch,
        drop_last=case.drop_last,
        format="arrow",
    )
    epoch_order = order(perm, case.seed, case.epoch)
    steps = ref.steps_per_epoch(case.m, case.s, case.g, case.drop_last)
    assert ds.steps_per_epoch == len(ds) == steps
    assert ds.rank_batch_size == case.g // case.w

    # worker k of K, from the start step, in this process
    got = list(worker_stream(ds, case.epoch, case.start, case.worker, case.num_workers))
    want = ref.rank_batches_from(
        epoch_order,
        case.s,
        case.g,
        case.w,
        case.rank,
        case.drop_last,
        start=case.start,
        worker=case.worker,
        num_workers=case.num_workers,
    )
    assert got == want

    # the public iteration from a checkpoint at the start step; a checkpoint at
    # the end of the epoch continues with the whole next epoch
    ds.load_state_dict({**ds.state_dict(), "epoch": case.epoch, "steps_consumed": case.start})
    if case.start < steps:
        want_all = ref.rank_batches(epoch_order, case.s, case.g, case.w, case.rank, case.drop_last)[
            case.start :
        ]
    else:
        assert (ds.epoch, ds.steps_consumed) == (case.epoch + 1, 0)
        want_all = ref.rank_batches(
            order(perm, case.seed, case.epoch + 1),
            case.s,
            case.g,
            case.w,
            case.rank,
            case.drop_last,
        )
    assert [ids_of(b) for b in ds] == want_all

    if case.kind == "clump3":  # clumps of 3 consecutive ids stay contiguous
        whole = case.m // 3 * 3
        for p in range(0, whole, 3):
            first = epoch_order[p]
            assert epoch_order[p : p + 3] == (first, first + 1, first + 2)


def test_later_epochs_differ_and_keep_every_row(perms: Perms) -> None:
    for kind in ("shuffled", "clump3"):
        perm = perms.get(kind)
        ds = dataset(perm, global_batch_size=ROWS, num_splits=1, drop_last=False)
        seen = []
        for epoch in range(3):
            ds.set_epoch(epoch)
            (batch,) = list(ds)  # one stream, one step: the whole epoch order
            assert ids_of(batch) == list(order(perm, 0, epoch))
            seen.append(ids_of(batch))
        assert seen[0] == list(stored_order(perm))
        assert len({tuple(s) for s in seen}) == 3, f"{kind}: epochs must differ"
        assert all(sorted(s) == list(range(ROWS)) for s in seen)
    plain = perms.get("plain")
    ds = dataset(plain, global_batch_size=ROWS, num_splits=1, epoch=5, shuffle_seed=3)
    assert ids_of(next(iter(ds))) == list(range(ROWS))  # unshuffled: stored order always


@pytest.mark.parametrize(("kind", "seed", "epoch"), [("shuffled", 7, 1), ("clump3", 2**64 - 1, 2)])
def test_epoch_blocks_of_a_large_split(big_perms: Perms, kind: str, seed: int, epoch: int) -> None:
    """More than two chunks of row ids: full blocks are permuted, the partial one stays."""
    perm = big_perms.get(kind)
    want = order(perm, seed, epoch)
    ds = dataset(
        perm,
        global_batch_size=16384,
        num_splits=1,
        shuffle_seed=seed,
        epoch=epoch,
        drop_last=False,
        format="arrow",
    )
    got = [i for batch in ds for i in ids_of(batch)]
    assert got == list(want)
    assert got != list(stored_order(perm))
    # one rank, one worker of three, from step 10
    ds = dataset(perm, global_batch_size=1200, num_splits=12, rank=2, world_size=3,
                 shuffle_seed=seed, epoch=epoch, format="arrow")  # fmt: skip
    got_steps = list(worker_stream(ds, epoch, 10, 1, 3))
    assert got_steps == ref.rank_batches_from(
        want, 12, 1200, 3, 2, True, start=10, worker=1, num_workers=3
    )


# ---------------------------------------------------------------------------
# Real worker processes


def check_epoch_coverage(
    perm: cr.Permutation, batches: list[list[int]], s: int, epoch: int
) -> None:
    """Every row at most once; exactly the last M - S*L rows of order_e left out."""
    counts = Counter(i for b in batches for i in b)
    assert set(counts.values()) == {1}
    dealt, left_out = ref.dealt_and_left_out(order(perm, 0, epoch), s)
    assert set(counts) == set(dealt)
    assert not set(counts) & set(left_out)


G_W, S_W = 24, 12  # 400 rows: streams of 33, 16 full steps and a partial one


@pytest.mark.parametrize("num_workers", [0, 1, 2, 3])
def test_workers_deal_like_one_process(perms: Perms, num_workers: int) -> None:
    perm = perms.get("shuffled")
    ds = dataset(perm, global_batch_size=G_W, num_splits=S_W, drop_last=False, format="torch")
    want = {e: ref.rank_batches(order(perm, 0, e), S_W, G_W, 1, 0, drop_last=False) for e in (0, 1)}
    if num_workers == 0:  # both epochs in this process
        loader = cr.DataLoader(ds)
        for epoch in (0, 1):
            got = [ids_of(b) for b in loader]
            assert got == want[epoch]
            check_epoch_coverage(perm, got, S_W, epoch)
        assert loader.state_dict()["epoch"] == 2
        return
    ds.set_epoch(1)
    if num_workers == 1:  # torch's own loader: the same batches, but no checkpoint
        loader = torch.utils.data.DataLoader(
            ds, batch_size=None, num_workers=1, multiprocessing_context="spawn"
        )
        got = [ids_of(b) for b in loader]
        with pytest.raises(RuntimeError, match=r"croupier\.DataLoader") as info:
            ds.state_dict()
        assert "StatefulDataLoader" in str(info.value)
    else:  # 2 workers spawned, 3 forked from the default fork server
        method = "spawn" if num_workers == 2 else "forkserver"
        context = {"multiprocessing_context": method} if method == "spawn" else {}
        loader = cr.DataLoader(ds, num_workers=num_workers, **context, in_process=False)
        assert loader.multiprocessing_context.get_start_method() == method
        got = [ids_of(b) for b in loader]
        assert (ds.state_dict()["epoch"], ds.state_dict()["steps_consumed"]) == (2, 0)
    assert got == want[1]
    check_epoch_coverage(perm, got, S_W, 1)


def test_forkserver_workers(perms: Perms) -> None:
    perm = perms.get("clump3")
    ds = dataset(perm, global_batch_size=G_W, num_splits=S_W, rank=1, world_size=2,
                 format="torch", drop_last=False)  # fmt: skip
    loader = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=2, multiprocessing_context="forkserver"
    )
    got = [ids_of(b) for b in loader]
    assert got == ref.rank_batches(order(perm, 0, 0), S_W, G_W, 2, 1, drop_last=False)
    with pytest.raises(RuntimeError, match=r"croupier\.DataLoader"):
        ds.state_dict()
    rank0 = [ids_of(b) for b in dataset(perm, global_batch_size=G_W, num_splits=S_W, rank=0,
                                         world_size=2, drop_last=False)]  # fmt: skip
    check_epoch_coverage(perm, got + rank0, S_W, 0)


# ---------------------------------------------------------------------------
# Resume at another world size and number of workers


def run_ranks(
    perm: cr.Permutation,
    world_size: int,
    *,
    epoch: int,
    stop: int | None,
    state: dict[str, Any] | None,
    num_workers: int,
    real_workers: bool,
    drop_last: bool,
) -> tuple[list[list[int]], dict[str, Any] | None]:
    """Every rank of ``world_size`` from ``state`` (or the start of ``epoch``), for
    ``stop`` steps (or to the end of the epoch).

    Returns the ids of each global step (all ranks together, sorted) and the
    state dict, checked equal on every rank (None with emulated workers, which
    do not move the dataset's position).
    """
    per_rank: list[list[list[int]]] = []
    states = []
    for r in range(world_size):
        ds = dataset(
            perm, rank=r, world_size=world_size, epoch=epoch, drop_last=drop_last, format="torch"
        )
        if state is not None:
            ds.load_state_dict(json.loads(json.dumps(state)))
        start = (ds.epoch, ds.steps_consumed)
        batches: list[list[int]] = []
        if num_workers and not real_workers:
            assert stop is None
            per_rank.append(as_if_loader(ds, num_workers))
            continue
        loader: Any = ds
        if real_workers:
            loader = cr.DataLoader(ds, num_workers=num_workers, in_process=False)
        for batch in loader:
            batches.append(ids_of(batch))
            position = (ds.state_dict()["epoch"], ds.state_dict()["steps_consumed"])
            # exact after every batch (normalised to the next epoch after the last step)
            assert position in {(start[0], start[1] + len(batches)), (start[0] + 1, 0)}
            if len(batches) == stop:
                break
        del loader
        per_rank.append(batches)
        states.append(json.loads(json.dumps(ds.state_dict())))
    assert all(s == states[0] for s in states), "the state dict differs between ranks"
    steps = [multiset([i for b in step for i in b]) for step in zip(*per_rank, strict=True)]
    return steps, (states[0] if states else None)


# (W1, K1) -> (W2, K2); "r" marks real worker processes, else workers are emulated
RESUMES = [
    pytest.param(4, 0, 3, 2, "shuffled", 0, 5, True, id="4to3-k2"),
    pytest.param(2, 0, 6, 0, "clump3", 1, 9, False, id="2to6-epoch1"),
    pytest.param(1, "2r", 4, 0, "shuffled", 1, 7, False, id="1to4-real-workers"),
    pytest.param(3, 0, 1, "2r", "shuffled", 1, 4, True, id="3to1-real-workers"),
    pytest.param(6, 0, 2, 2, "plain", 0, 0, False, id="6to2-at-0"),
    pytest.param(12, 0, 1, 0, "clump3", 2, 15, True, id="12to1-last-step"),
    pytest.param(1, 0, 12, 2, "shuffled", 3, 11, False, id="1to12"),
    pytest.param(2, 0, 3, 0, "shuffled", 1, 16, False, id="2to3-partial-step-left"),
]


@pytest.mark.parametrize(("w1", "k1", "w2", "k2", "kind", "epoch", "stop", "drop_last"), RESUMES)
def test_resume_elsewhere(
    perms: Perms,
    w1: int,
    k1: int | str,
    w2: int,
    k2: int | str,
    kind: str,
    epoch: int,
    stop: int,
    drop_last: bool,
) -> None:
    perm = perms.get(kind)
    want = expected_steps(perm, 12, 24, 0, epoch, drop_last)
    assert stop < len(want)

    def workers(k: int | str) -> tuple[int, bool]:
        return (int(k[:-1]), True) if isinstance(k, str) else (k, False)

    n1, real1 = workers(k1)
    if stop == 0:  # a checkpoint taken before the first step
        before, state = [], dataset(perm, epoch=epoch, drop_last=drop_last).state_dict()
    else:
        before, state = run_ranks(
            perm, w1, epoch=epoch, stop=stop, state=None, num_workers=n1, real_workers=real1,
            drop_last=drop_last,
        )  # fmt: skip
    assert state is not None
    assert (state["format"], state["epoch"], state["steps_consumed"]) == (2, epoch, stop)
    n2, real2 = workers(k2)
    after, end = run_ranks(perm, w2, epoch=0, stop=None, state=state,
                           num_workers=n2, real_workers=real2, drop_last=drop_last)  # fmt: skip
    assert before + after == want
    if end is not None:
        assert (end["epoch"], end["steps_consumed"]) == (epoch + 1, 0)
    everything = Counter(i for step in before + after for i in step)
    assert set(everything.values()) == {1}, "a row was dealt twice"


def test_resume_across_the_epoch_boundary(perms: Perms) -> None:
    perm = perms.get("shuffled")
    kwargs = {"epoch": 0, "num_workers": 0, "real_workers": False, "drop_last": True}
    epoch0, state = run_ranks(perm, 2, stop=None, state=None, **kwargs)
    assert state is not None
    assert epoch0 == expected_steps(perm, 12, 24, 0, 0, True)
    assert (state["epoch"], state["steps_consumed"]) == (1, 0)  # end of epoch: next one

    # a restarted job calls set_epoch(e) for the epoch it resumes in: no effect
    for r in range(3):
        ds = dataset(perm, rank=r, world_size=3)
        ds.load_state_dict(state)
        ds.set_epoch(1)
        assert (ds.epoch, ds.steps_consumed) == (1, 0)
    epoch1, state = run_ranks(perm, 3, stop=None, state=state, **kwargs)
    assert state is not None
    assert epoch1 == expected_steps(perm, 12, 24, 0, 1, True)

    # a training loop over epochs, resumed mid-epoch 1 at another world size
    want = expected_steps(perm, 12, 24, 0, 1, True) + expected_steps(perm, 12, 24, 0, 2, True)
    mid, state = run_ranks(perm, 4, stop=6, state={**state, "epoch": 1}, **kwargs)
    assert state is not None
    assert (state["epoch"], state["steps_consumed"]) == (1, 6)
    per_rank = []
    for r in range(6):
        ds = dataset(perm, rank=r, world_size=6)
        ds.load_state_dict(state)
        batches = []
        for epoch in (1, 2):
            ds.set_epoch(epoch)  # keeps the resumed position in epoch 1
            batches += [ids_of(b) for b in ds]
        per_rank.append(batches)
    rest = [multiset([i for b in step for i in b]) for step in zip(*per_rank, strict=True)]
    assert mid + rest == want

    # set_epoch to another epoch starts that epoch from its first step
    ds = dataset(perm)
    ds.load_state_dict(state)
    ds.set_epoch(2)
    assert (ds.epoch, ds.steps_consumed) == (2, 0)
    assert [multiset(ids_of(b)) for b in ds] == expected_steps(perm, 12, 24, 0, 2, True)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader(perms: Perms, num_workers: int) -> None:
    """Mid-epoch, after the last batch, and after the end of the iteration: each
    ``loader.state_dict()`` continues exactly in a new loader."""
    perm = perms.get("clump3")

    def want(epoch: int) -> list[list[int]]:
        return ref.rank_batches(order(perm, 5, epoch), 12, 24, 2, 1, drop_last=False)

    options: dict[str, Any] = {"batch_size": None, "num_workers": num_workers}
    if num_workers:
        options["multiprocessing_context"] = "spawn"

    def resumed(state: dict[str, Any] | None, epoch: int = 1) -> StatefulDataLoader:
        ds = dataset(perm, rank=1, world_size=2, shuffle_seed=5, epoch=epoch, drop_last=False,
                     format="torch")  # fmt: skip
        loader = StatefulDataLoader(ds, **options)
        if state is not None:
            loader.load_state_dict(state)
        return loader

    def take(loader: StatefulDataLoader, n: int | None) -> list[list[int]]:
        out = []
        for batch in loader:
            out.append(ids_of(batch))
            if len(out) == n:
                break
        return out

    # stop mid-epoch 1
    loader = resumed(None)
    first = take(loader, 5)
    state = loader.state_dict()
    del loader
    # resume; stop right after the last batch of the epoch (no StopIteration yet)
    loader = resumed(state)
    rest = take(loader, len(want(1)) - 5)
    assert first + rest == want(1)
    state = loader.state_dict()
    del loader
    # a dict saved at the end of an epoch resumes at step 0 of the next epoch
    loader = resumed(state)
    assert take(loader, None) == want(2), "after the last batch of epoch 1"
    state = loader.state_dict()  # the iteration ended (StopIteration)
    del loader
    # After StopIteration torchdata starts the next iteration afresh from the
    # main process's dataset, which with workers never saw the epoch advance:
    # as with any torch DataLoader, the training loop sets the epoch (the
    # documented contract; with num_workers=0 the dataset advances itself).
    epoch = 3 if num_workers else 1
    assert take(resumed(state, epoch), None) == want(3), "after the end of epoch 2"


# ---------------------------------------------------------------------------
# Errors (docs/concepts.md: "The dealing order", "Checkpoints")


def has_numbers(message: str, *numbers: int) -> bool:
    return all(re.search(rf"(?<![\d-]){n}(?!\d)", message) for n in numbers)


@pytest.mark.parametrize(
    ("kwargs", "numbers"),
    [
        ({"global_batch_size": 10, "num_splits": 4}, (10, 4)),  # G % S
        ({"global_batch_size": 12, "num_splits": 6, "world_size": 4, "rank": 0}, (6, 4)),  # S % W
        ({"global_batch_size": 800, "num_splits": 400, "m": 399}, (400, 399)),  # S > M
        ({"global_batch_size": 8, "num_splits": 4, "world_size": 2, "rank": 2}, (2,)),
        ({"global_batch_size": 8, "num_splits": 4, "world_size": 2, "rank": -1}, (-1, 0)),
    ],
    ids=["G%S", "S%W", "S>M", "rank=W", "rank<0"],
)
def test_construction_errors(perms: Perms, kwargs: dict[str, Any], numbers: tuple[int]) -> None:
    kwargs = dict(kwargs)
    perm = perms.get("shuffled", kwargs.pop("m", ROWS))
    with pytest.raises(cr.InvalidArgumentError) as info:
        cr.StreamingDataset(perm, columns=["id"], **kwargs)
    message = str(info.value)
    assert has_numbers(message, *numbers), message
    if kwargs.get("rank", 0) not in range(kwargs.get("world_size", 1)):
        assert "rank" in message


def test_mismatched_state_dicts(perms: Perms) -> None:
    perm = perms.get("shuffled")
    ds = dataset(perm, shuffle_seed=3)
    mine = ds.state_dict()
    others = {
        "permutation_id": dataset(perms.get("clump3"), shuffle_seed=3).state_dict(),
        "num_splits": dataset(perm, num_splits=6, shuffle_seed=3).state_dict(),
        "global_batch_size": dataset(perm, global_batch_size=48, shuffle_seed=3).state_dict(),
        "shuffle_seed": dataset(perm, shuffle_seed=4).state_dict(),
        "table_version": {**mine, "table_version": "p0123456789abcdef"},
    }
    for field, other in others.items():
        assert other[field] != mine[field]
        with pytest.raises(cr.InvalidArgumentError) as info:
            ds.load_state_dict(other)
        message = str(info.value)
        assert field in message
        assert str(other[field]) in message, message
        assert str(mine[field]) in message, message
    assert ds.state_dict() == mine  # a refused dict changes nothing
