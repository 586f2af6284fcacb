"""Real DataLoader worker processes: spawn deals like num_workers=0; fork is refused."""

from __future__ import annotations

import functools
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap
import warnings
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch.multiprocessing  # registers torch's reductions with ForkingPickler
import torch.utils.data
from conftest import plain

import croupier as cr
from croupier import _lib, _native
from croupier._runs import RUN_STEPS, Steps, merge_runs
from croupier.dataloader import _note_reads_in_process
from croupier.dataset import WORKER_ALLOWANCE, merge_stats

G, S = 16, 8


def ids(loader: object) -> list[list[int]]:
    return [batch["id"].tolist() for batch in loader]  # type: ignore[attr-defined]


def dataset(source: str | cr.Permutation, **kwargs: object) -> cr.StreamingDataset:
    """Over a table URI or a permutation; a partial last step (1003 rows)."""
    rows = cr.open_table(source) if isinstance(source, str) else source
    return cr.StreamingDataset(
        rows, global_batch_size=G, num_splits=S, columns=["id"], drop_last=False, **kwargs
    )


def test_torch_dataloader_spawn_workers(table_uri: str) -> None:
    expected = ids(dataset(table_uri))
    ds = dataset(table_uri)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=2, multiprocessing_context="spawn"
    )
    assert ids(loader) == expected
    # the dataset went to worker processes it cannot hear from
    with pytest.raises(RuntimeError, match=r"croupier\.DataLoader") as info:
        ds.state_dict()
    assert "StatefulDataLoader" in str(info.value)


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_croupier_dataloader_three_workers(table_uri: str) -> None:
    expected = ids(dataset(table_uri))
    ds = dataset(table_uri)
    loader = cr.DataLoader(ds, num_workers=3, in_process=False)
    # Forked from a fork server that has imported torch and croupier (Linux).
    assert loader.multiprocessing_context.get_start_method() == "forkserver"
    assert ids(loader) == expected
    assert ds.state_dict()["epoch"] == 1
    assert ds.state_dict()["steps_consumed"] == 0


def test_croupier_dataloader_refuses_fork(table_uri: str) -> None:
    with pytest.raises(cr.InvalidArgumentError, match="fork"):
        cr.DataLoader(dataset(table_uri), num_workers=1, multiprocessing_context="fork")
    with pytest.raises(cr.InvalidArgumentError, match="batch_size"):
        cr.DataLoader(dataset(table_uri), batch_size=4)
    with pytest.raises(cr.InvalidArgumentError, match="in_order"):
        cr.DataLoader(dataset(table_uri), num_workers=2, in_order=False)


def record_gomaxprocs(folder: str, worker_id: int) -> None:
    """A worker_init_fn: write the worker's Go GOMAXPROCS to ``folder``."""
    Path(folder, f"worker-{worker_id}").write_text(str(_native.gomaxprocs()))


@pytest.mark.parametrize("env", [None, "3"])
def test_workers_share_the_cores(
    table_uri: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: str | None
) -> None:
    """Each of K workers' Go runtime runs on cores ÷ K (at least 1), unless
    GOMAXPROCS is in the environment; this process's runtime is left alone.
    Workers forked from a fork server see the environment the server started
    with, so the variable set here reaches spawned workers."""
    options: dict[str, Any] = {}
    if env is not None:
        monkeypatch.setenv("GOMAXPROCS", env)
        options["multiprocessing_context"] = "spawn"
    here = _native.gomaxprocs()
    record = functools.partial(record_gomaxprocs, str(tmp_path))
    loader = cr.DataLoader(dataset(table_uri), num_workers=2, worker_init_fn=record, **options)
    assert ids(loader) == ids(dataset(table_uri))
    want = int(env) if env is not None else max(1, len(os.sched_getaffinity(0)) // 2)
    assert [int((tmp_path / f"worker-{k}").read_text()) for k in range(2)] == [want, want]
    assert _native.gomaxprocs() == here


def test_workers_divide_the_memory_budget(table_uri: str) -> None:
    """Each of K workers gets (memory_budget - K * WORKER_ALLOWANCE) // K: a
    budget that holds a step in one process but not so divided fails in the
    workers, with an error that says why, unless divide_budget=False; a budget
    that leaves nothing once the allowances are set aside is refused."""
    # A step needs about 105 kB here (most of it 4 batches read ahead), up to
    # 135 kB with 26 decoders.
    budget = 2 * WORKER_ALLOWANCE + 160_000
    expected = ids(dataset(table_uri, memory_budget=budget))
    assert len(expected) == dataset(table_uri).steps_per_epoch
    small = cr.DataLoader(dataset(table_uri, memory_budget=budget), num_workers=2, in_process=False)
    with pytest.raises(cr.InvalidArgumentError, match="memory_budget 60000 bytes") as info:
        ids(small)
    assert f"divides the dataset's memory_budget {budget} among its workers" in str(info.value)
    assert "divide_budget=False" in str(info.value)
    loader = cr.DataLoader(dataset(table_uri, memory_budget=budget), num_workers=2,
                           divide_budget=False, in_process=False)  # fmt: skip
    assert ids(loader) == expected
    too_small = 2 * WORKER_ALLOWANCE
    small = cr.DataLoader(dataset(table_uri, memory_budget=too_small), num_workers=2,
                          in_process=False)  # fmt: skip
    with pytest.raises(cr.InvalidArgumentError, match="is too small for 2 DataLoader workers"):
        ids(small)
    loader = cr.DataLoader(dataset(table_uri, memory_budget=too_small), num_workers=2,
                           divide_budget=False, in_process=False)  # fmt: skip
    assert ids(loader) == expected
    # With no budget set, the workers divide Go's default, which the dataset reports.
    assert dataset(table_uri)._info["memory_budget"] == 512 << 20


def shared_stream(ds: cr.StreamingDataset, start: int, w: int, k: int, coalesce: int) -> Any:
    """Worker w of k's stream from step ``start``, sharing steps."""
    options = {"epoch": 0, "start_step": start, "worker": w, "num_workers": k,
               "share_steps": True, "coalesce_bytes": coalesce}  # fmt: skip
    return _lib.stream_open(ds._handle(), options)


def shared_runs(ds: cr.StreamingDataset, start: int, w: int, k: int, coalesce: int) -> list[Steps]:
    """Worker w of k's runs from step ``start``, sharing steps, none released
    (each in a slot of its own)."""
    stream = shared_stream(ds, start, w, k, coalesce)
    try:
        return list(ds._runs(stream, start, w))
    finally:
        stream.close()


@pytest.mark.parametrize("coalesce", [0, 4 << 10, 1 << 20])
def test_runs_are_cut_from_the_streams_batches(
    orders: dict[str, cr.Permutation], coalesce: int
) -> None:
    """The workers' runs, made of batches of one step each, of several steps that
    end inside a run, or of up to 64 steps that span runs: every worker sends
    every run, its part written compactly, and the parts merge to the rows of
    the run's steps."""
    for order in orders.values():
        ds = dataset(order)
        rows = [batch["id"].tolist() for batch in ds]
        end = len(rows)
        for k, start in [(1, 0), (3, 0), (2, 21), (3, end - 20)]:
            workers = [shared_runs(ds, start, w, k, coalesce) for w in range(k)]
            slots: dict[tuple[int, int], torch.Tensor] = {}
            for w, runs in enumerate(workers):
                assert [r.first for r in runs] == list(range(start, end, RUN_STEPS))
                assert all(r.worker == w for r in runs)
                for r in runs:
                    assert r.steps == min(RUN_STEPS, end - r.first)
                    for b in r.batches(slots):
                        assert b.get_total_buffer_size() == b.nbytes  # no slice of more
            schema = None
            for parts in zip(*workers, strict=True):
                merged, sizes = merge_runs(parts, slots, schema)
                steps = parts[0].step_numbers()
                assert merged.column("id").to_pylist() == [i for t in steps for i in rows[t]]
                assert sizes == [len(rows[t]) for t in steps]
                schema = merged.schema
            assert all(slot[0] == 0 for slot in slots.values())  # all released


def test_runs_cross_in_shared_memory(table_uri: str) -> None:
    """A worker writes its runs into shared-memory slots of its own: a run
    pickles for the worker's result queue, with torch's reductions, as a
    handle to its slot's memory when the slot is new, and as the slot's number
    once the main process has released it and the worker uses it again;
    what arrives reads the same rows, in place."""
    columns = ["id", "tokens", "text"]
    ds = cr.StreamingDataset(cr.open_table(table_uri), global_batch_size=G, num_splits=S,
                             columns=columns, drop_last=False)  # fmt: skip
    want = [b["id"].tolist() for b in cr.DataLoader(ds)]
    stream = shared_stream(ds, 0, 0, 1, 1 << 20)
    slots: dict[tuple[int, int], torch.Tensor] = {}
    sizes, steps = [], []
    try:
        for r in ds._runs(stream, 0, 0):
            sent = ForkingPickler.dumps(r)
            got = pickle.loads(sent)
            assert got.slot == 0  # the one slot, released before the next run
            if got.memory is None:
                assert len(sent) < 1024
            else:
                assert got.memory.is_shared()
                assert len(sent) < 4096 < got.size
                sizes.append(got.size)
            (batch,) = got.batches(slots)
            assert batch.column("id").to_pylist() == [i for t in r.step_numbers() for i in want[t]]
            steps += r.step_numbers()
            del batch
            got.release(slots)
    finally:
        stream.close()
    assert steps == list(range(len(want)))
    assert 1 <= len(sizes) < len(want) // RUN_STEPS  # made, and grown, rarely
    assert sizes == sorted(sizes)


@pytest.fixture
def orders(table_uri: str, tmp_path: Path) -> dict[str, cr.Permutation]:
    """A sequential and a shuffled permutation of the table."""
    sequential = cr.PermutationBuilder(cr.open_table(table_uri))
    shuffled = cr.PermutationBuilder(cr.open_table(table_uri)).shuffle(seed=5)
    return {
        name: builder.persist(f"file://{tmp_path / name}", progress=False)["all"]
        for name, builder in [("sequential", sequential), ("shuffled", shuffled)]
    }


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
@pytest.mark.parametrize(("order", "num_workers"), [("sequential", 2), ("shuffled", 3)])
def test_workers_deal_runs_in_step_order(
    orders: dict[str, cr.Permutation], order: str, num_workers: int
) -> None:
    """Under croupier.DataLoader the workers deal runs of steps; every step reaches
    the training loop once, in order, with the rows num_workers=0 gives it."""
    expected = ids(dataset(orders[order]))
    assert len(expected) > num_workers * RUN_STEPS  # a worker deals more than one run
    ds = dataset(orders[order])
    loader = cr.DataLoader(ds, num_workers=num_workers, in_process=False)
    assert ids(loader) == expected
    assert (ds.epoch, ds.steps_consumed) == (1, 0)


@pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")
def test_resume_runs_at_another_world_size(orders: dict[str, cr.Permutation]) -> None:
    """Stopped inside a run of worker 1 of 2, a checkpoint resumes on 2 ranks with 3
    and 1 workers: the rest of the epoch holds exactly the steps not yet trained."""
    perm = orders["shuffled"]
    expected = [set(b) for b in ids(dataset(perm))]
    stop = RUN_STEPS + 5
    ds = dataset(perm)
    first = []
    for batch in cr.DataLoader(ds, num_workers=2, in_process=False):
        first.append(set(batch["id"].tolist()))
        if len(first) == stop:
            break
    state = ds.state_dict()
    assert state["steps_consumed"] == stop
    per_rank = []
    for rank, num_workers in [(0, 3), (1, 1)]:
        resumed = dataset(perm, rank=rank, world_size=2)
        resumed.load_state_dict(state)
        loader = cr.DataLoader(resumed, num_workers, in_process=False)
        per_rank.append([set(b["id"].tolist()) for b in loader])
    rest = [a | b for a, b in zip(*per_rank, strict=True)]
    assert first + rest == expected


FORK_SCRIPT = textwrap.dedent(
    """
    import sys
    import torch.utils.data
    import croupier as cr

    ds = cr.StreamingDataset(cr.open_table(sys.argv[1]), global_batch_size=8, format="numpy")
    loader = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=1, multiprocessing_context="fork"
    )
    try:
        next(iter(loader))
    except Exception as exc:
        print(type(exc).__name__, exc)
        sys.exit(3)
    print("no error")
    """
)


def test_fork_after_load_raises_and_never_hangs(table_uri: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT, table_uri],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stdout.startswith("ForkError")
    assert "fork" in done.stdout
    assert "spawn" in done.stdout


UNGUARDED_SCRIPT = textwrap.dedent(
    """
    import os
    import sys

    import torch.distributed

    import croupier as cr

    if "TORCHELASTIC_RUN_ID" in os.environ:
        torch.distributed.init_process_group("gloo")
    ds = cr.StreamingDataset(cr.open_table(sys.argv[1]), global_batch_size=8, format="numpy")
    for batch in cr.DataLoader(ds, num_workers=1, in_process=False):
        pass
    print("no error")
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("launcher", [[], ["-m", "torch.distributed.run", "--nproc_per_node", "1"]])
def test_workers_from_an_unguarded_script_fail_fast(
    table_uri: str, tmp_path: Path, launcher: list[str]
) -> None:
    """A script that starts workers from its top-level code, outside
    ``if __name__ == "__main__":``, is refused before any worker (or the fork
    server) imports it again, run by itself or by torchrun after
    init_process_group; guarded, the same code reads every batch."""
    script = tmp_path / "train.py"
    script.write_text(UNGUARDED_SCRIPT)
    done = subprocess.run(
        [sys.executable, *launcher, str(script), table_uri],
        capture_output=True,
        text=True,
        timeout=300,  # the refusal comes within seconds; a hang would take forever
    )
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "InvalidArgumentError" in out, out
    assert 'outside an `if __name__ == "__main__":` block' in out, out
    assert f"{script} (line 12)" in out, out
    if launcher:
        return
    body = UNGUARDED_SCRIPT.split("import croupier as cr\n", 1)[1]
    guarded = UNGUARDED_SCRIPT.replace(
        body, 'if __name__ == "__main__":\n' + textwrap.indent(body, "    ")
    )
    script.write_text(guarded)
    done = subprocess.run(
        [sys.executable, str(script), table_uri], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == "no error\n"


@pytest.mark.parametrize(
    ("format", "list_format"),
    [("torch", "packed"), ("torch", "padded"), ("numpy", "packed"), ("arrow", "packed"),
     ("python", "packed")],
)  # fmt: skip
def test_workers_send_arrow_and_the_loader_converts(
    table_uri: str, format: str, list_format: str
) -> None:
    """With croupier.DataLoader, workers send their batches in Arrow, several steps
    at once, and the main process converts them: the batches are those of
    num_workers=0, in every format."""
    columns = ["id", "tokens", "reward", "flag", "text"]

    def make() -> cr.StreamingDataset:
        return cr.StreamingDataset(cr.open_table(table_uri), global_batch_size=G, num_splits=S,
                                   columns=columns, drop_last=False, format=format,
                                   list_format=list_format)  # fmt: skip

    want = [plain(b) for b in cr.DataLoader(make())]
    ds = make()
    loader = cr.DataLoader(ds, num_workers=2, in_process=False)
    assert [plain(b) for b in loader] == want
    # what crosses from the workers: each worker's rows of every run of steps
    # in Arrow, the workers' parts of a run one after the other, in order
    sent = list(loader._from_workers())
    assert all(isinstance(s, Steps) for s in sent)
    assert not ds._send_runs  # the dataset here stays as it was
    assert not ds._divide_budget
    assert [s.worker for s in sent] == [0, 1] * (len(sent) // 2)
    steps = [t for s in sent[::2] for t in s.step_numbers()]
    assert steps == list(range(ds.steps_per_epoch))
    assert [s.first for s in sent[1::2]] == [s.first for s in sent[::2]]
    assert max(s.steps for s in sent) == RUN_STEPS


def rows(batch: dict[str, Any]) -> dict[str, Any]:
    """A collate that needs a converted batch (picklable for spawn workers)."""
    assert isinstance(batch, dict)
    return {"id": batch["id"], "rows": len(batch["id"])}


def test_workers_convert_when_a_collate_must_see_batches(table_uri: str) -> None:
    """A dataset collate or a collate_fn runs in the workers on converted batches."""
    expected = ids(dataset(table_uri))
    for loader in (
        cr.DataLoader(dataset(table_uri, collate=rows), num_workers=2),
        cr.DataLoader(dataset(table_uri), num_workers=2, collate_fn=rows),
    ):
        assert ids(loader) == expected
        assert all(isinstance(b, dict) and "rows" in b for b in loader._from_workers())


def test_workers_asked_for_read_in_process(table_uri: str) -> None:
    """A StreamingDataset that runs no code of the user's in workers is read in
    this process whatever ``num_workers`` asks: the loader starts no worker,
    says ``num_workers`` 0 (and warns once) and deals the batches and checkpoints of a loader
    without workers; ``in_process=False``, a ``collate_fn`` or a
    ``worker_init_fn`` start them; ``in_process=True`` refuses a
    ``worker_init_fn``, which would never run."""
    want = ids(dataset(table_uri))
    plain_loader = cr.DataLoader(dataset(table_uri))
    batches = iter(plain_loader)
    [next(batches) for _ in range(3)]
    want_state = plain_loader.state_dict()
    del batches
    _note_reads_in_process.cache_clear()
    with warnings.catch_warnings(record=True) as noted:
        warnings.simplefilter("always")
        loader = cr.DataLoader(dataset(table_uri), num_workers=2, prefetch_factor=4)
        cr.DataLoader(dataset(table_uri), num_workers=2)
    assert [str(w.message) for w in noted if "starts no worker" in str(w.message)] == [
        "croupier.DataLoader: num_workers=2 starts no worker processes: the dataset runs no "
        "Python code of yours, so the Go core reads it in this process, on every core "
        "(loader.num_workers is 0). in_process=False starts them anyway (docs/tuning.md "
        "says what each costs)"
    ]  # once
    assert loader.num_workers == 0
    # Workers of earlier tests may still be shutting down: none is new.
    before = {p.pid for p in multiprocessing.active_children()}
    batches = iter(loader)
    assert [next(batches)["id"].tolist() for _ in range(3)] == want[:3]
    assert {p.pid for p in multiprocessing.active_children()} <= before
    assert loader.state_dict() == want_state
    del batches
    assert ids(loader) == want[3:]  # the next iteration resumes after them
    assert cr.DataLoader(dataset(table_uri), num_workers=2, in_process=False).num_workers == 2
    assert cr.DataLoader(dataset(table_uri), num_workers=2, collate_fn=rows).num_workers == 2
    assert cr.DataLoader(dataset(table_uri), num_workers=2, worker_init_fn=print).num_workers == 2
    assert cr.DataLoader(dataset(table_uri, collate=rows), num_workers=2).num_workers == 2
    inside = cr.DataLoader(dataset(table_uri, collate=rows), num_workers=2, in_process=True)
    assert inside.num_workers == 0
    assert all("rows" in b for b in inside)
    with pytest.raises(cr.InvalidArgumentError, match="starts no workers to run worker_init_fn"):
        cr.DataLoader(dataset(table_uri), num_workers=2, in_process=True, worker_init_fn=print)


def test_workers_decode_each_row_group_once(orders: dict[str, cr.Permutation]) -> None:
    """Workers sharing steps decode, between them, what one process does: in a
    full shuffle of a table that fits the budget, each row group once (workers
    taking turns at steps each decoded nearly every row group)."""
    decoded = {}
    for k in (0, 2, 3):
        ds = cr.StreamingDataset(orders["shuffled"], global_batch_size=G, num_splits=S,
                                 drop_last=False)  # fmt: skip
        assert len(list(cr.DataLoader(ds, num_workers=k, in_process=False))) == ds.steps_per_epoch
        stats = ds.stats()
        decoded[k] = stats["row_groups"], stats["decoded_bytes"]
    assert decoded[0][0] == 11  # the table's row groups
    assert decoded[2] == decoded[3] == decoded[0]


def test_stats_and_len_of_a_resumed_loader(table_uri: str) -> None:
    """Resumed inside an epoch, the dataset and croupier.DataLoader say how many
    batches are left, exactly as many as come; the training process's stats()
    adds up its workers' streams: every step and row they dealt."""
    n = dataset(table_uri).steps_per_epoch  # 63 steps: 4 runs of 16, the last short
    resume = 5
    for num_workers in (0, 2):
        ds = dataset(table_uri)
        ds.load_state_dict({**ds.state_dict(), "steps_consumed": resume})
        loader = cr.DataLoader(ds, num_workers=num_workers, in_process=False)
        assert len(ds) == len(loader) == n - resume
        assert ds.stats() == {}
        batches = ids(loader)
        assert len(batches) == n - resume
        assert len(ds) == len(loader) == n  # the next epoch, whole
        stats = ds.stats()
        assert stats["steps"] == n - resume, num_workers
        assert stats["rows"] == sum(len(b) for b in batches)
        assert stats["kept_rows"] == stats["rows"]
        assert 0 < stats["held_peak"] <= stats["held_limit"]


def test_merge_stats() -> None:
    """Counters add up over workers, peaks too (the workers' rows are held side
    by side); a horizon, the counts of rounds formed and the steps of workers
    sharing steps are the most of any worker."""
    a = {"steps": 3, "rows": 30, "held_peak": 100, "horizon_steps": 4, "held_limit": 500}
    b = {"steps": 2, "rows": 20, "held_peak": 300, "horizon_steps": 2, "held_limit": 500}
    assert merge_stats([a, b]) == {
        "steps": 5, "rows": 50, "held_peak": 400, "horizon_steps": 4, "held_limit": 1000,
    }  # fmt: skip
    assert merge_stats([a]) == a
    assert merge_stats([]) == {}
    # Workers sharing steps each deal every step, their rows of it.
    assert merge_stats([a, b], shared=True) == {
        "steps": 3, "rows": 50, "held_peak": 400, "horizon_steps": 4, "held_limit": 1000,
    }  # fmt: skip
    # Every worker of a FollowingDataset forms the same rounds, each as far as it
    # got; its listings add up, and one that waited out makes the whole.
    f = {"steps": 2, "rounds": 3, "version": 7, "new_rows": 90, "waits": 1, "waited_out": False}
    g = {"steps": 1, "rounds": 4, "version": 9, "new_rows": 120, "waits": 2, "waited_out": True}
    assert merge_stats([f, g]) == {
        "steps": 3, "rounds": 4, "version": 9, "new_rows": 120, "waits": 3, "waited_out": True,
    }  # fmt: skip


def test_workers_and_their_runs_hold_the_budget(tmp_path: Path) -> None:
    """With K workers sharing steps, each worker's Go stream gets three quarters
    of (memory_budget - K * WORKER_ALLOWANCE) // K and the runs waiting in its
    slots the other quarter:
    rows of 200 to 2,000 values but for three of 1,000,000 in one step (a run
    larger than a quarter crosses alone) are dealt as in one process, the
    slots never wait with more than their quarter but for a run alone, and a
    budget too small for three quarters of its half fails saying how it was
    divided."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(200, 2001, 512)
    lengths[100:103] = 1_000_000
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = pa.array(rng.integers(0, 1 << 20, int(offsets[-1]), dtype=np.int32))
    rows = pa.table(
        {"id": pa.array(np.arange(512)), "tokens": pa.ListArray.from_arrays(offsets, values)}
    )
    table = cr.create_table(f"file://{tmp_path}/wide", rows)
    budget = 2 * WORKER_ALLOWANCE + (64 << 20)

    def wide(**kwargs: object) -> cr.StreamingDataset:
        return cr.StreamingDataset(table, global_batch_size=16, num_splits=1, **kwargs)  # type: ignore[arg-type]

    expected = ids(wide(memory_budget=budget))
    ds = wide(memory_budget=budget)
    assert ids(cr.DataLoader(ds, num_workers=2, in_process=False)) == expected
    stats = ds.stats()
    quarter = (budget - 2 * WORKER_ALLOWANCE) // 2 // 4
    assert stats["sent_limit"] == 2 * quarter
    assert stats["sent_alone"] > quarter  # the runs with the largest rows crossed alone
    assert stats["sent_peak"] <= stats["sent_limit"] + stats["sent_alone"]
    small = cr.DataLoader(
        wide(memory_budget=2 * WORKER_ALLOWANCE + 400_000), num_workers=2, in_process=False
    )
    with pytest.raises(cr.InvalidArgumentError, match="memory_budget 150000 bytes") as info:
        ids(small)
    assert "150000 bytes each" in str(info.value)
