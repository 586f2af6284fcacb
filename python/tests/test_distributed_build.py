"""persist(group=...): processes of a gloo process group build one
permutation together, the one a single process builds, byte for byte."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import uri

import croupier as cr

HELPER = Path(__file__).with_name("distributed_rank.py")

Calls = list[list[Any]]


def build(table: str, calls: Calls) -> cr.PermutationBuilder:
    builder = cr.PermutationBuilder(cr.open_table(table))
    for name, args, kwargs in calls:
        builder = getattr(builder, name)(*args, **kwargs)
    return builder


def run_ranks(
    tmp_path: Path, table: str, builds: list[tuple[str, Calls]], world: int
) -> list[list[dict[str, Any]]]:
    """Start ``world`` processes of a gloo group that make each ``(uri, calls)``
    build together, one after the other; each build's replies of each rank."""
    job = {
        "store": str(tmp_path / f"store-{world}-{len(list(tmp_path.iterdir()))}"),
        "world": world,
        "table": table,
        "builds": [{"uri": at, "calls": calls} for at, calls in builds],
    }
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(HELPER), json.dumps({**job, "rank": rank})],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for rank in range(world)
    ]
    replies = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        replies.append(json.loads(out.strip().splitlines()[-1]))
    return [list(build) for build in zip(*replies, strict=True)]


def stored(folder: Path) -> dict[str, bytes]:
    """The objects of a persisted permutation, by path, but its build record."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and p.name != "build.json"
    }


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> str:
    """3000 rows in 30 row groups of two files, with a column ``n`` of
    lengths that is null in the very last row only."""
    folder = tmp_path_factory.mktemp("dist") / "table"
    folder.mkdir()
    for f, (start, n) in enumerate([(0, 1200), (1200, 1800)]):
        ids = list(range(start, start + n))
        data = pa.table(
            {
                "id": np.array(ids, dtype=np.int64),
                "text": pa.array([f"row {i}" for i in ids]),
                "n": pa.array([None if i == 2999 else i % 11 for i in ids], type=pa.int64()),
            }
        )
        pq.write_table(data, folder / f"part-{f:05d}.parquet", row_group_size=100)
    return uri(folder)


SPECS: dict[str, Calls] = {
    "stored": [["filter", ["id % 3 != 1"], {}]],
    "shuffle": [["shuffle", [], {"seed": 5}]],
    "hash clumps lengths": [
        ["filter", ["n IS NOT NULL"], {}],
        ["split_hash", [["text"]], {"weights": [3, 1], "split_names": ["train", "val"]}],
        ["shuffle", [], {"seed": 2, "clump_size": 4}],
        ["lengths", ["n"], {}],
    ],
    "groups": [
        ["filter", ["n IS NOT NULL"], {}],
        ["group_by", ["n"], {}],
        ["split_hash", [["n"]], {"weights": [1, 1, 1]}],
        ["shuffle", [], {"seed": 3}],
    ],
    "random": [
        ["split_random", [], {"ratios": [0.7, 0.2], "seed": 3, "clump_size": 4}],
        ["shuffle", [], {"seed": 4}],
    ],
    "sequential": [["split_sequential", [], {"fixed": 700}], ["lengths", ["id"], {}]],
}


def test_ranks_build_one_process_permutation(table: str, tmp_path: Path) -> None:
    singles = {}
    for name, calls in SPECS.items():
        singles[name] = build(table, calls).persist(uri(tmp_path / name / "one"), progress=False)
    for world in (1, 2, 4):
        builds = [(uri(tmp_path / name / f"w{world}"), calls) for name, calls in SPECS.items()]
        for name, replies in zip(SPECS, run_ranks(tmp_path, table, builds, world), strict=True):
            single = singles[name]
            assert [r.get("id") for r in replies] == [single.id] * world, (name, replies)
            assert replies[0]["rows"] == [len(s) for s in single], name
            assert stored(tmp_path / name / f"w{world}") == stored(tmp_path / name / "one"), name


def test_failing_rank_commits_nothing(table: str, tmp_path: Path) -> None:
    # The null length is in the last row group, which the last rank scans; the
    # same processes then build again at the same place, and a refused spec, with its own error
    # on every rank.
    at = tmp_path / "p"
    failing: Calls = [["shuffle", [], {"seed": 1}], ["lengths", ["n"], {}]]
    fixed: Calls = [["filter", ["n IS NOT NULL"], {}], *failing]
    with pytest.raises(cr.InvalidArgumentError, match="null"):
        build(table, failing).persist(uri(tmp_path / "one"))
    single = build(table, fixed).persist(uri(tmp_path / "one"))
    grouped: Calls = [["group_by", ["text"], {}], ["shuffle", [], {"seed": 1, "clump_size": 4}]]
    builds = [(uri(at), failing), (uri(at), fixed), (uri(tmp_path / "g"), grouped)]
    failed, again, refused = run_ranks(tmp_path, table, builds, 2)

    for r in failed:
        assert r.get("type") == "InvalidArgumentError", r
        assert "rank 1 of 2 failed" in r["error"], r
        assert "null" in r["error"], r
    assert [r.get("id") for r in again] == [single.id] * 2, again
    assert stored(at) == stored(tmp_path / "one")
    assert not [p for p in (at / "_spill").rglob("*") if p.is_file()]
    for r in refused:
        assert r.get("type") == "InvalidArgumentError", r
        assert "clump_size and window do not apply" in r["error"], r
    assert not (tmp_path / "g" / "permutation.json").exists()
