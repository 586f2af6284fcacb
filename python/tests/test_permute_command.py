"""``python -m croupier.permute``: the permutation builds of torchrun jobs.

The ranks are real processes (torch imports take seconds each): under
torchrun, alone, and started here with torchrun's environment, to kill one.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import uri

import croupier as cr
from croupier import permute

TORCHRUN = Path(sys.executable).with_name("torchrun")

FLAGS = ["--filter", "n != 3", "--split-hash", "text:3,1", "--split-names", "train,val"]
FLAGS += ["--shuffle-seed", "2", "--clump", "4", "--lengths", "n"]


def single(table: str, at: Path) -> cr.Permutations:
    """The permutation of FLAGS built by ``persist`` in this process."""
    return (
        cr.PermutationBuilder(cr.open_table(table))
        .filter("n != 3")
        .split_hash(["text"], [3, 1], split_names=["train", "val"])
        .shuffle(seed=2, clump_size=4)
        .lengths("n")
        .persist(uri(at), progress=False)
    )


def stored(folder: Path) -> dict[str, bytes]:
    """The objects of a persisted permutation, by path, but its build record."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and p.name != "build.json"
    }


def write(folder: Path, files: int, rows: int, row_group: int) -> str:
    """A table of ``files`` files of ``rows`` rows each, in row groups of ``row_group``."""
    folder.mkdir()
    for f in range(files):
        ids = np.arange(f * rows, (f + 1) * rows, dtype=np.int64)
        data = pa.table({"id": ids, "text": pc.cast(pa.array(ids), pa.string()), "n": ids % 11})
        pq.write_table(data, folder / f"part-{f:05d}.parquet", row_group_size=row_group)
    return uri(folder)


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> str:
    """3000 rows in 30 row groups of three files."""
    return write(tmp_path_factory.mktemp("permute") / "table", 3, 1000, 100)


def environment(**extra: str) -> dict[str, str]:
    """This process's environment (PYTHONPATH, CROUPIER_LIBRARY) for a rank, on loopback."""
    return {**os.environ, "GLOO_SOCKET_IFNAME": "lo", **extra}


def command(*args: str) -> list[str]:
    return ["-m", "croupier.permute", *args]


@pytest.mark.slow
def test_torchrun_builds_one_process_permutation(table: str, tmp_path: Path) -> None:
    one = single(table, tmp_path / "one")
    at = tmp_path / "two"
    done = subprocess.run(
        [TORCHRUN, "--standalone", "--nproc-per-node", "2", *command(table, uri(at), *FLAGS)],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert stored(at) == stored(tmp_path / "one")
    assert f"permutation  {one.id}\nuri          {uri(at)}\n" in done.stdout
    assert done.stdout.count("permutation  ") == 1, "only rank 0 prints the permutation"
    for rank in (0, 1):
        assert f"rank {rank} of 2: scan: " in done.stderr, done.stderr


@pytest.mark.slow
def test_without_torchrun_builds_alone(table: str, tmp_path: Path) -> None:
    one = single(table, tmp_path / "one")
    at = tmp_path / "alone"
    env = {k: v for k, v in environment().items() if k not in ("WORLD_SIZE", "RANK")}
    done = subprocess.run(
        [sys.executable, *command(table, uri(at), *FLAGS, "--json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert stored(at) == stored(tmp_path / "one")
    assert f'"id": "{one.id}"' in done.stdout
    assert "scan: 3000/3000 (100%)" in done.stderr, done.stderr


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_ranks(table: str, at: Path | list[str], world: int) -> list[subprocess.Popen[str]]:
    """``world`` ranks of the command building at ``at`` (or each at its own
    URI), with the environment torchrun gives its workers (a gloo group
    through a TCP store on this host)."""
    port = str(free_port())
    uris = at if isinstance(at, list) else [uri(at)] * world
    return [
        subprocess.Popen(
            [sys.executable, *command(table, uris[rank], *FLAGS, "--timeout", "60")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment(
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(world),
            ),
        )
        for rank in range(world)
    ]


@pytest.mark.slow
def test_killed_rank_fails_the_others(tmp_path: Path) -> None:
    # Rank 1 is killed once it prints its first progress line, in its scan
    # or as it ends: the build then still needs it to order and write its
    # share of the table's 2,000,000 rows, some 100 ms more, far longer than
    # the kill takes to land; so rank 0 waits for it in an exchange, which
    # gloo fails as the connection closes.
    table = write(tmp_path / "table", 2, 1_000_000, 50_000)
    at = tmp_path / "perm"
    ranks = start_ranks(table, at, 2)
    try:
        killed_rank_fails_the_others(table, at, ranks, tmp_path)
    finally:
        for r in ranks:
            if r.poll() is None:
                r.kill()
                r.communicate()


def killed_rank_fails_the_others(
    table: str, at: Path, ranks: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    assert ranks[1].stderr is not None
    seen = []
    for line in ranks[1].stderr:
        seen.append(line)
        if line.startswith("rank 1 of 2: "):
            ranks[1].send_signal(signal.SIGKILL)
            break
    ranks[1].communicate(timeout=60)
    assert ranks[1].returncode == -signal.SIGKILL, "".join(seen)
    out, err = ranks[0].communicate(timeout=120)
    assert ranks[0].returncode == 1, (
        f"rank 0 finished the build before rank 1 was killed?\n{out}{err}"
    )
    assert "croupier.permute: rank 0 of 2: UnavailableError: " in err, err
    assert "rank 0 of 2 lost the group: rank 1 stopped answering" in err, err
    assert re.search(r"Connection (closed|reset) by peer", err), err  # gloo's own words
    assert out == ""
    assert not (at / "permutation.json").exists()
    # rank 0, failing, deleted the build's spill, the killed rank's too
    assert spilled(at) == [], spilled(at)

    # the same ranks again, at the same place
    ranks[:] = start_ranks(table, at, 2)
    results = [r.communicate(timeout=120) for r in ranks]
    assert [r.returncode for r in ranks] == [0, 0], results
    one = single(table, tmp_path / "one")
    assert f"permutation  {one.id}\n" in results[0][0]
    assert stored(at) == stored(tmp_path / "one")


def spilled(at: Path) -> list[str]:
    """The objects under the spill folder of the permutation at ``at``."""
    return sorted(str(p.relative_to(at)) for p in (at / "_spill").rglob("*") if p.is_file())


@pytest.mark.slow
def test_killed_build_spill_is_swept(tmp_path: Path) -> None:
    # Both ranks are killed at once as the first of them starts ordering, so
    # that neither deletes the spill: the first wrote its own out as its
    # scan ended. An hour on (the objects' times set back), a build that
    # commits at the same place deletes it; before, it is kept, as the
    # spill of a build that may still run.
    table = write(tmp_path / "table", 2, 1_000_000, 50_000)
    at = tmp_path / "perm"
    ranks = start_ranks(table, at, 2)
    try:
        kill_at_order(ranks)
    finally:
        for r in ranks:
            if r.poll() is None:
                r.kill()
            r.communicate()
    assert [r.returncode for r in ranks] == [-signal.SIGKILL] * 2
    assert not (at / "permutation.json").exists()
    left = spilled(at)
    assert any(re.fullmatch(r"_spill/[0-9a-f]{16}/[01]/\d+/\d+/\d{8}", k) for k in left), left
    assert any(re.fullmatch(r"_spill/[0-9a-f]{16}/lease-[01]", k) for k in left), left

    hour_ago = time.time() - 3700
    for p in (at / "_spill").rglob("*"):
        os.utime(p, (hour_ago, hour_ago))
    ranks[:] = start_ranks(table, at, 2)
    results = [r.communicate(timeout=120) for r in ranks]
    assert [r.returncode for r in ranks] == [0, 0], results
    assert spilled(at) == []
    single(table, tmp_path / "one")
    assert stored(at) == stored(tmp_path / "one")


def kill_at_order(ranks: list[subprocess.Popen[str]]) -> None:
    """Kill every rank as soon as one of them prints its first progress line
    of ordering."""
    ordering = threading.Event()

    def watch(r: subprocess.Popen[str]) -> None:
        assert r.stderr is not None
        for line in r.stderr:
            if re.match(r"rank \d of 2: order: ", line):
                ordering.set()

    watchers = [threading.Thread(target=watch, args=(r,), daemon=True) for r in ranks]
    for w in watchers:
        w.start()
    assert ordering.wait(timeout=120), "no rank started ordering"
    for r in ranks:
        r.send_signal(signal.SIGKILL)
    for w in watchers:
        w.join(timeout=60)


@pytest.mark.slow
def test_rank_that_cannot_start_fails_every_rank(table: str, tmp_path: Path) -> None:
    # Rank 1 cannot create its permutation's folder: it reports that at the
    # first exchange, so rank 0 does not wait for it, and both say why.
    at = tmp_path / "perm"
    ranks = start_ranks(table, [uri(at), "file:///proc/self/perm"], 2)
    results = [r.communicate(timeout=120) for r in ranks]
    for rank, (out, err) in enumerate(results):
        assert ranks[rank].returncode == 1, err
        assert f"rank {rank} of 2: InvalidArgumentError: " in err, err
        assert "rank 1 of 2 failed: create folder file:///proc/self/perm" in err, err
        assert out == ""
    assert not (at / "permutation.json").exists()


def test_flags_become_builder_calls() -> None:
    args = permute.parser().parse_args(["t", "p", *FLAGS, "--window", "0"])
    assert permute.builder_calls(args) == [
        ("filter", ("n != 3",), {}),
        ("split_hash", (["text"], [3, 1]), {"discard_weight": 0, "split_names": ["train", "val"]}),
        ("shuffle", (2,), {"clump_size": 4, "window": None}),
        ("lengths", ("n",), {}),
    ]
    args = permute.parser().parse_args(["t", "p", "--split-random", "90%,10%", "--seed", "3"])
    assert permute.builder_calls(args) == [
        ("split_random", (), {"ratios": [0.9, 0.1], "seed": 3, "split_names": None})
    ]
    args = permute.parser().parse_args(
        ["t", "p", "--split-calculated", "id % 2", "--clump", "auto"]
    )
    assert permute.builder_calls(args) == [
        ("split_calculated", ("id % 2",), {"split_names": []}),
        ("shuffle", (0,), {"clump_size": "auto", "window": None}),
    ]


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--split-random", "0.9,0.1", "--split-hash", "a:1,1"], "are exclusive"),
        (["--split-hash", "a"], "want col1,col2:w1,w2[:discard]"),
        (["--split-sequential", "fixed"], "needs --split-fixed N"),
        (["--seed", "1"], "need a --split-* flag"),
        (["--clump", "many"], "want a count of rows"),
    ],
)
def test_bad_flags_exit_2(flags: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert permute.main(["t", "p", *flags]) == 2
    assert says in capsys.readouterr().err


def test_rank_without_torchrun_environment_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.delenv("RANK", raising=False)
    assert permute.main(["t", "p"]) == 2
    assert "WORLD_SIZE and RANK" in capsys.readouterr().err
