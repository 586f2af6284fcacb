"""PermutationBuilder and open_permutations over real Parquet folders.

The tables here are plain Parquet folders written with pyarrow. Their ``id``
column holds each row's position in file order (files sorted by name, then row
offset), which is the row id croupier gives a row of such a folder; the golden
values below pin that addressing.

The split and shuffle algorithms are checked against independent plain-Python
statements of what ``permutation/random.go`` and ``permutation/hash.go``
document (SplitMix64, Lemire's bounded integers, Fisher-Yates, SHA-256 key
derivation, XXH64 over a canonical encoding of the values).
"""

from __future__ import annotations

import hashlib
import itertools
import pickle
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import spec_reference as ref
import torch.utils.data
from conftest import uri

import croupier as cr

MASK = (1 << 64) - 1

# -- independent references ------------------------------------------------------------


def derive_key(seed: int, purpose: str) -> int:
    digest = hashlib.sha256(
        b"croupier/v1\x00" + purpose.encode() + b"\x00" + seed.to_bytes(8, "little")
    ).digest()
    return int.from_bytes(digest[:8], "little")


class SplitMix64:
    def __init__(self, key: int) -> None:
        self.state = key

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    def below(self, n: int) -> int:
        """Lemire's multiply-and-reject: uniform in [0, n)."""
        product = self.next() * n
        if product & MASK < n:
            threshold = (-n % (1 << 64)) % n
            while product & MASK < threshold:
                product = self.next() * n
        return product >> 64


def permute(key: int, items: list[int]) -> list[int]:
    """Fisher-Yates from the last element down."""
    out, rng = list(items), SplitMix64(key)
    for i in range(len(out) - 1, 0, -1):
        j = rng.below(i + 1)
        out[i], out[j] = out[j], out[i]
    return out


def reference_random_split(
    ids: list[int], sizes: Sequence[int], seed: int, shuffle_seed: int | None
) -> list[list[int]]:
    drawn = permute(derive_key(seed, "split_random"), ids)
    out, at = [], 0
    for i, n in enumerate(sizes):
        part = sorted(drawn[at : at + n])
        if shuffle_seed is not None:
            part = permute(derive_key(shuffle_seed, f"shuffle/{i}"), part)
        out.append(part)
        at += n
    return out


_P1, _P2, _P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
_P4, _P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & MASK


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & MASK, 31) * _P1) & MASK


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64 as published by Yann Collet."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & MASK, (seed + _P2) & MASK, seed, (seed - _P1) & MASK]
        while i + 32 <= n:
            for k in range(4):
                v[k] = _round(v[k], int.from_bytes(data[i + 8 * k : i + 8 * k + 8], "little"))
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & MASK
        for lane in v:
            h = (((h ^ _round(0, lane)) * _P1) + _P4) & MASK
    else:
        h = (seed + _P5) & MASK
    h = (h + n) & MASK
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i : i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & MASK
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i : i + 4], "little") * _P1) & MASK
        h = (_rotl(h, 23) * _P2 + _P3) & MASK
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & MASK
        h = (_rotl(h, 11) * _P1) & MASK
        i += 1
    h ^= h >> 33
    h = (h * _P2) & MASK
    h ^= h >> 29
    h = (h * _P3) & MASK
    return h ^ (h >> 32)


def encode_value(v: object) -> bytes:
    """The canonical encoding hash splits hash (null, integer or string values)."""
    if v is None:
        return b"\x00"
    if isinstance(v, int):
        return b"\x02" + struct.pack("<q", v)
    assert isinstance(v, str)
    raw, length, varint = v.encode(), len(v.encode()), b""
    while True:
        byte = length & 0x7F
        length >>= 7
        varint += bytes([byte | (0x80 if length else 0)])
        if not length:
            break
    return b"\x05" + varint + raw


def hash_bucket(values: Sequence[object], weights: Sequence[int], discard: int = 0) -> int:
    """The split a row with these column values lands in; -1 for none."""
    x = xxh64(b"".join(encode_value(v) for v in values)) % (sum(weights) + discard)
    cum = 0
    for i, w in enumerate(weights):
        cum += w
        if x < cum:
            return i
    return -1


def cumulative_sizes(m: int, ratios: Sequence[str]) -> list[int]:
    """Split i ends at round(m * (r0 + ... + ri)), halves up (exact arithmetic)."""
    out, prev, cum = [], 0, Fraction(0)
    for r in ratios:
        cum += Fraction(r)
        end = min(int(m * cum + Fraction(1, 2)), m)
        out.append(end - prev)
        prev = end
    return out


def test_references_match_published_values() -> None:
    # XXH64 test vectors (xxhash's reference implementation, seed 0).
    assert xxh64(b"") == 0xEF46DB3751D8E999
    assert xxh64(b"a") == 0xD24EC4F1A98C6E5B
    assert xxh64(b"abc") == 0x44BC2CF5AD770999
    # SplitMix64 seeded with 1234567 (Vigna's splitmix64.c).
    rng = SplitMix64(1234567)
    assert [rng.next() for _ in range(3)] == [
        6457827717110365317,
        3203168211198807973,
        9817491932198370423,
    ]
    assert derive_key(1234, "shuffle") == 0xC88ACEF35EAFF34B
    assert permute(derive_key(42, "shuffle"), list(range(10))) == [8, 2, 7, 9, 1, 6, 0, 5, 3, 4]


# -- tables ----------------------------------------------------------------------------

ROLES = ["user", "assistant", "system"]


def rollouts(start: int, n: int, problems: int = 40) -> pa.Table:
    """Rows ``start .. start+n``; every value derives from the row's ``id``."""
    ids = np.arange(start, start + n, dtype=np.int64)
    rng = np.random.default_rng([*ids[:1].tolist(), n])
    reward = np.round(rng.normal(size=n), 3)
    return pa.table(
        {
            "id": pa.array(ids),
            "problem_id": pa.array((ids * 7919) % problems),
            "reward": pa.array(reward, mask=ids % 11 == 5),
            "role": pa.array([ROLES[i % 3] for i in ids.tolist()]),
        }
    )


def write_folder(folder: Path, sizes: Sequence[int], row_group_size: int = 50) -> str:
    """Write ``part-00000.parquet``, ... of consecutive ids; returns the folder's URI."""
    folder.mkdir(parents=True, exist_ok=True)
    start = 0
    for i, n in enumerate(sizes):
        pq.write_table(
            rollouts(start, n), folder / f"part-{i:05d}.parquet", row_group_size=row_group_size
        )
        start += n
    return uri(folder)


def read_folder(folder_uri: str) -> pa.Table:
    folder = Path(folder_uri.removeprefix("file://"))
    return pa.concat_tables(pq.read_table(p) for p in sorted(folder.glob("*.parquet")))


@pytest.fixture(scope="module")
def rollouts_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """600 rows in three files, row groups of 50."""
    return write_folder(tmp_path_factory.mktemp("rollouts") / "t", [250, 200, 150])


@pytest.fixture
def perm_uri(tmp_path: Path) -> Callable[[str], str]:
    return lambda name: uri(tmp_path / "perms" / name)


def ids_of(perms: cr.Permutations) -> list[list[int]]:
    return [split.row_ids().tolist() for split in perms]


def kept(data: pa.Table, mask: pa.ChunkedArray | pa.Array) -> list[int]:
    return np.flatnonzero(pc.fill_null(mask, False).to_numpy(zero_copy_only=False)).tolist()


# -- end to end ------------------------------------------------------------------------


def test_filter_hash_split_shuffle(rollouts_uri: str, perm_uri: Callable[[str], str]) -> None:
    tbl = cr.open_table(rollouts_uri)
    data = read_folder(rollouts_uri)
    sql = "reward > 0 AND role = 'assistant'"
    weights, discard = [3, 1], 1
    perms = (
        cr.PermutationBuilder(tbl)
        .filter(sql)
        .split_hash(["problem_id"], weights, discard_weight=discard, split_names=["train", "val"])
        .shuffle(seed=1234)
        .persist(perm_uri("p"), progress=False)
    )
    assert perms.names == ["train", "val"]
    assert perms["train"].name == "train"
    assert perms[1].name == "val"
    assert perms[-1].name == "val"
    selected = kept(
        data, pc.and_kleene(pc.greater(data["reward"], 0), pc.equal(data["role"], "assistant"))
    )
    problems = data["problem_id"].to_pylist()
    expected: list[list[int]] = [[], []]
    for row in selected:
        bucket = hash_bucket([problems[row]], weights, discard)
        if bucket >= 0:
            expected[bucket].append(row)
    got = ids_of(perms)
    assert [sorted(g) for g in got] == expected
    assert all(len(e) > 0 for e in expected)
    assert len(set(got[0]) | set(got[1])) < len(selected)  # some rows were discarded
    assert got[0] != expected[0]  # shuffled
    assert {problems[r] for r in got[0]}.isdisjoint(problems[r] for r in got[1])

    prov = perms["val"].provenance
    assert prov["split_name"] == "val"
    assert prov["filter"] == sql
    assert prov["table_uri"] == rollouts_uri
    assert prov["table_version"] == tbl.version
    assert prov["shuffle"]["seed"] == 1234
    assert perms.provenance["split"] == {
        "kind": "hash",
        "columns": ["problem_id"],
        "weights": weights,
        "discard_weight": discard,
        "names": ["train", "val"],
    }
    assert prov["splits"] == {"train": len(got[0]), "val": len(got[1])}
    assert (prov["rows_scanned"], prov["rows_kept"]) == (600, len(selected))
    assert perms["train"].id == f"{perms.id}/train"
    assert len(perms["train"]) == len(got[0])


def test_split_provenance_keeps_the_split_spec(
    rollouts_uri: str, perm_uri: Callable[[str], str]
) -> None:
    perms = (
        cr.PermutationBuilder(cr.open_table(rollouts_uri))
        .split_hash(["problem_id"], [3, 1], split_names=["train", "val"])
        .persist(perm_uri("p"))
    )
    spec = perms.provenance["split"]
    assert spec["kind"] == "hash"
    prov = perms["train"].provenance
    assert prov["table_version"] == perms.provenance["table_version"]
    # the split's own provenance names the split and still records how splits were made
    assert spec in prov.values()


def test_without_split_every_kept_row_is_in_all(
    rollouts_uri: str, perm_uri: Callable[[str], str]
) -> None:
    perms = cr.PermutationBuilder(cr.open_table(rollouts_uri)).persist(perm_uri("p"))
    assert perms.names == ["all"]
    assert perms[0].row_ids().tolist() == list(range(600))
    data = read_folder(rollouts_uri)
    perms = (
        cr.PermutationBuilder(cr.open_table(rollouts_uri))
        .filter("role IN ('user', 'system')")
        .persist(perm_uri("q"))
    )
    assert perms["all"].row_ids().tolist() == kept(data, pc.not_equal(data["role"], "assistant"))


@pytest.fixture(scope="module")
def hundred(tmp_path_factory: pytest.TempPathFactory) -> cr.Table:
    """100 rows, ids 0..99; ``filter("id < M")`` makes a table of M kept rows."""
    return cr.open_table(write_folder(tmp_path_factory.mktemp("hundred") / "t", [100]))


@pytest.mark.parametrize(
    ("m", "ratios"),
    [
        (10, ["0.25", "0.25", "0.5"]),  # 2.5 -> 3, 5, 10: sizes 3, 2, 5
        (7, ["0.5", "0.25"]),  # 3.5 -> 4, 5.25 -> 5: sizes 4, 1; 2 rows in no split
        (6, ["0.125", "0.125", "0.75"]),  # 0.75 -> 1, 1.5 -> 2, 6
        (3, ["0.5", "0.5"]),  # 1.5 -> 2, 3
        (1, ["0.5", "0.5"]),  # 0.5 -> 1: sizes 1, 0
        (100, ["0.9", "0.1"]),
        (37, ["0.3", "0.3", "0.4"]),
    ],
)
@pytest.mark.parametrize("kind", ["random", "sequential"])
def test_ratio_sizes_round_cumulatively(
    hundred: cr.Table, perm_uri: Callable[[str], str], m: int, ratios: list[str], kind: str
) -> None:
    builder = cr.PermutationBuilder(hundred).filter(f"id < {m}")
    if kind == "random":
        builder.split_random(ratios=[float(r) for r in ratios], seed=3)
    else:
        builder.split_sequential(ratios=[float(r) for r in ratios])
    perms = builder.persist(perm_uri("p"))
    sizes = cumulative_sizes(m, ratios)
    assert [len(s) for s in perms] == sizes
    got = ids_of(perms)
    flat = [r for part in got for r in part]
    assert len(set(flat)) == len(flat) == sum(sizes)
    assert set(flat) <= set(range(m))
    for part in got:
        assert part == sorted(part)  # without a shuffle, row id order
    if kind == "sequential":
        assert flat == list(range(sum(sizes)))  # consecutive runs, in order
    else:
        assert got == reference_random_split(list(range(m)), sizes, 3, None)


@pytest.mark.parametrize("kind", ["random", "sequential"])
def test_counts_and_fixed(hundred: cr.Table, perm_uri: Callable[[str], str], kind: str) -> None:
    def build(name: str, **how: object) -> list[list[int]]:
        builder = cr.PermutationBuilder(hundred).filter("id < 10")
        if kind == "random":
            builder.split_random(seed=11, **how)  # type: ignore[arg-type]
        else:
            builder.split_sequential(**how)  # type: ignore[arg-type]
        return ids_of(builder.persist(perm_uri(name)))

    counts = build("counts", counts=[3, 0, 4])
    assert [len(p) for p in counts] == [3, 0, 4]
    fixed = build("fixed", fixed=3)
    assert [len(p) for p in fixed] == [3, 3, 3]  # floor(10 / 3) splits; one row in none
    exact = build("exact", counts=[4, 6])
    assert sorted(exact[0] + exact[1]) == list(range(10))
    if kind == "sequential":
        assert counts == [[0, 1, 2], [], [3, 4, 5, 6]]
        assert fixed == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    else:
        assert counts == reference_random_split(list(range(10)), [3, 0, 4], 11, None)
        assert fixed == reference_random_split(list(range(10)), [3, 3, 3], 11, None)


def test_fixed_with_split_names(hundred: cr.Table, perm_uri: Callable[[str], str]) -> None:
    perms = (
        cr.PermutationBuilder(hundred)
        .filter("id < 10")
        .split_sequential(fixed=3, split_names=["a", "b", "c"])
        .persist(perm_uri("p"))
    )
    assert perms.names == ["a", "b", "c"]
    # fixed=3 over 10 rows makes 3 splits: 2 or 4 names cannot name them
    for i, names in enumerate([["a", "b"], ["a", "b", "c", "d"]]):
        builder = (
            cr.PermutationBuilder(hundred)
            .filter("id < 10")
            .split_sequential(fixed=3, split_names=names)
        )
        with pytest.raises(cr.InvalidArgumentError, match="name"):
            builder.persist(perm_uri(f"bad{i}"))


def test_random_split_seeds(rollouts_uri: str, perm_uri: Callable[[str], str]) -> None:
    tbl = cr.open_table(rollouts_uri)

    def build(name: str, seed: int) -> list[list[int]]:
        builder = cr.PermutationBuilder(tbl).split_random(ratios=[0.8, 0.2], seed=seed)
        return ids_of(builder.persist(perm_uri(name)))

    a, b, c = build("a", 5), build("b", 5), build("c", 6)
    assert a == b
    assert a != c
    assert [len(p) for p in a] == [len(p) for p in c] == [480, 120]
    assert sorted(a[0] + a[1]) == list(range(600))
    assert a == reference_random_split(list(range(600)), [480, 120], 5, None)


def test_calculated_split(rollouts_uri: str, perm_uri: Callable[[str], str]) -> None:
    data = read_folder(rollouts_uri)
    perms = (
        cr.PermutationBuilder(cr.open_table(rollouts_uri))
        .split_calculated("problem_id % 3", split_names=["zero", "one"])
        .persist(perm_uri("p"))
    )
    problems = data["problem_id"].to_numpy()
    assert perms.names == ["zero", "one"]
    assert perms["zero"].row_ids().tolist() == np.flatnonzero(problems % 3 == 0).tolist()
    assert perms["one"].row_ids().tolist() == np.flatnonzero(problems % 3 == 1).tolist()
    assert len(perms[0]) + len(perms[1]) < 600  # problem_id % 3 == 2: in no split


def test_shuffle_clumps_and_windows(rollouts_uri: str, perm_uri: Callable[[str], str]) -> None:
    tbl = cr.open_table(rollouts_uri)
    clumped = cr.PermutationBuilder(tbl).shuffle(seed=9, clump_size=8).persist(perm_uri("c"))
    order = clumped[0].row_ids().tolist()
    assert sorted(order) == list(range(600))
    assert order != list(range(600))
    for at in range(0, 600, 8):
        clump = order[at : at + 8]
        assert clump == list(range(clump[0], clump[0] + len(clump)))
        assert clump[0] % 8 == 0
    windowed = (
        cr.PermutationBuilder(tbl).shuffle(seed=9, clump_size=10, window=6).persist(perm_uri("w"))
    )
    order = windowed[0].row_ids().tolist()
    assert sorted(order) == list(range(600))
    for at in range(0, 600, 60):  # each window holds 6 whole clumps of one 60-row span
        span = {r // 60 for r in order[at : at + 60]}
        assert len(span) == 1


def test_auto_clump_size(tmp_path: Path, perm_uri: Callable[[str], str]) -> None:
    """``clump_size="auto"`` clumps by the pages of the widest column: each
    clump is a whole page's run of consecutive rows, and the spec records -1."""
    rows = pa.table({"id": pa.array(range(10000), pa.int64())})
    tbl = cr.create_table(f"file://{tmp_path}/t", rows)
    perms = cr.PermutationBuilder(tbl).shuffle(seed=4, clump_size="auto").persist(perm_uri("a"))
    assert perms.provenance["shuffle"]["clump_size"] == -1
    order = perms[0].row_ids().tolist()
    assert sorted(order) == list(range(10000))
    runs = [[order[0]]]  # maximal runs of consecutive ids
    for prev, r in itertools.pairwise(order):
        if r == prev + 1:
            runs[-1].append(r)
        else:
            runs.append([r])
    starts = sorted(run[0] for run in runs)
    # croupier's 16 KiB pages hold about 2,048 8-byte ids; row groups of 4,096
    # rows start pages too
    assert {0, 4096, 8192} <= set(starts)
    assert 4 <= len(runs) <= 8
    assert all(len(run) <= 2100 for run in runs)


# -- hash splits across versions and golden values ------------------------------------------


def test_hash_split_stable_across_appends(tmp_path: Path, perm_uri: Callable[[str], str]) -> None:
    folder = tmp_path / "t"
    u = write_folder(folder, [300])

    def assignment(name: str) -> dict[int, int]:
        perms = (
            cr.PermutationBuilder(cr.open_table(u))
            .split_hash(["problem_id", "role"], [8, 1, 1], split_names=["train", "val", "test"])
            .shuffle(seed=3)
            .persist(perm_uri(name))
        )
        return {row: i for i, split in enumerate(perms) for row in split.row_ids().tolist()}

    before = assignment("v1")
    assert sorted(before) == list(range(300))
    # a later version: one more file whose rows reuse the old problems and roles
    pq.write_table(rollouts(300, 200), folder / "part-00001.parquet", row_group_size=50)
    after = assignment("v2")
    assert sorted(after) == list(range(500))
    assert {row: after[row] for row in before} == before
    data = read_folder(u)
    key = list(zip(data["problem_id"].to_pylist(), data["role"].to_pylist(), strict=True))
    split_of_key = {key[row]: split for row, split in before.items()}
    for row in range(300, 500):
        if key[row] in split_of_key:  # no leakage: a seen key stays in its split
            assert after[row] == split_of_key[key[row]]


# Golden values. These pin the persisted outcome of the specified algorithms; if
# one changes, every persisted permutation changes: the builder's format version
# (permutation.FormatVersion) must change with it; never edit them to pass.
GOLDEN_RANDOM = [
    [12, 17, 1, 15, 14, 18, 5, 8, 9, 3],
    [7, 16, 13, 4, 19, 2, 0, 6, 10, 11],
]
GOLDEN_STRINGS = ["alpha", "beta", "gamma", "delta", "", "épée", "x" * 40]
GOLDEN_STRING_SPLITS = [0, 2, 2, 2, 1, 0, 1]
GOLDEN_INTS = [0, 1, 42, -7, 1 << 40, 123456789, -(1 << 63)]
GOLDEN_INT_SPLITS = [0, 2, 2, 1, 1, 2, 2]


def test_golden_random_split_and_shuffle(tmp_path: Path, perm_uri: Callable[[str], str]) -> None:
    folder = tmp_path / "t"
    folder.mkdir()
    pq.write_table(pa.table({"id": pa.array(range(20), pa.int64())}), folder / "a.parquet")
    perms = (
        cr.PermutationBuilder(cr.open_table(uri(folder)))
        .split_random(ratios=[0.5, 0.5], seed=7)
        .shuffle(seed=42)
        .persist(perm_uri("p"))
    )
    assert perms.provenance["format"] == 2  # format 2 added digests; orders are those of 1
    assert ids_of(perms) == GOLDEN_RANDOM
    assert reference_random_split(list(range(20)), [10, 10], 7, 42) == GOLDEN_RANDOM


def test_golden_hash_split(tmp_path: Path, perm_uri: Callable[[str], str]) -> None:
    folder = tmp_path / "t"
    folder.mkdir()
    weights = [1, 1, 1]
    for name, values, typ, golden in [
        ("s", GOLDEN_STRINGS, pa.string(), GOLDEN_STRING_SPLITS),
        ("i", GOLDEN_INTS, pa.int64(), GOLDEN_INT_SPLITS),
        ("i32", GOLDEN_INTS[:4], pa.int32(), GOLDEN_INT_SPLITS[:4]),  # width does not matter
        ("ls", GOLDEN_STRINGS, pa.large_string(), GOLDEN_STRING_SPLITS),
    ]:
        path = folder / name
        path.mkdir()
        pq.write_table(pa.table({"v": pa.array(values, typ)}), path / "a.parquet")
        perms = (
            cr.PermutationBuilder(cr.open_table(uri(path)))
            .split_hash(["v"], weights)
            .persist(perm_uri(name))
        )
        got = [-1] * len(values)
        for i, split in enumerate(perms):
            for row in split.row_ids().tolist():
                got[row] = i
        assert got == golden, name
        assert got == [hash_bucket([v], weights) for v in values], name


# -- persisted form ------------------------------------------------------------------------

BUILD_SCRIPT = textwrap.dedent(
    """
    import sys
    import croupier as cr
    (cr.PermutationBuilder(cr.open_table(sys.argv[1]))
        .filter("reward > -0.5")
        .split_hash(["problem_id"], [4, 1], split_names=["train", "val"])
        .shuffle(seed=77, clump_size=3)
        .persist(sys.argv[2], progress=False))
    """
)


def files_under(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith("build.json")
    }


def test_builds_are_byte_identical_across_processes(rollouts_uri: str, tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    subprocess.run(
        [sys.executable, "-c", BUILD_SCRIPT, rollouts_uri, uri(there)], check=True, timeout=120
    )
    perms = (
        cr.PermutationBuilder(cr.open_table(rollouts_uri))
        .filter("reward > -0.5")
        .split_hash(["problem_id"], [4, 1], split_names=["train", "val"])
        .shuffle(seed=77, clump_size=3)
        .persist(uri(here), progress=False)
    )
    ours, theirs = files_under(here), files_under(there)
    assert "permutation.json" in ours
    assert any(name.endswith(".ids") for name in ours)
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert ours[name] == theirs[name], name
    other = cr.open_permutations(uri(there))
    assert other.id == perms.id
    assert ids_of(other) == ids_of(perms)


def test_row_ids_slices(rollouts_uri: str, perm_uri: Callable[[str], str]) -> None:
    perms = (
        cr.PermutationBuilder(cr.open_table(rollouts_uri)).shuffle(seed=1).persist(perm_uri("p"))
    )
    split = perms[0]
    whole = split.row_ids()
    assert whole.dtype == np.uint64
    assert len(whole) == len(split) == 600
    for start, stop in [(0, 0), (0, 1), (17, 333), (599, 600), (600, 600), (0, 600)]:
        assert split.row_ids(start, stop).tolist() == whole[start:stop].tolist()
    assert split.row_ids(250).tolist() == whole[250:].tolist()
    for start, stop in [(-1, 3), (0, 601), (5, 4), (601, 601)]:
        with pytest.raises(cr.InvalidArgumentError, match=r"out of range|start must be"):
            split.row_ids(start, stop)


def test_persist_twice_and_open_nothing(
    rollouts_uri: str, tmp_path: Path, perm_uri: Callable[[str], str]
) -> None:
    tbl = cr.open_table(rollouts_uri)
    cr.PermutationBuilder(tbl).persist(perm_uri("p"))
    with pytest.raises(cr.AlreadyExistsError):
        cr.PermutationBuilder(tbl).persist(perm_uri("p"))
    with pytest.raises(cr.AlreadyExistsError):
        cr.PermutationBuilder(tbl).filter("id < 3").persist(perm_uri("p"))
    assert len(cr.open_permutations(perm_uri("p"))[0]) == 600  # the first one is intact
    with pytest.raises(cr.NotFoundError):
        cr.open_permutations(uri(tmp_path / "nothing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(cr.NotFoundError, match="permutation"):
        cr.open_permutations(uri(tmp_path / "empty"))


@pytest.mark.parametrize("change", ["overwrite", "remove"])
def test_changed_table_file(tmp_path: Path, perm_uri: Callable[[str], str], change: str) -> None:
    folder = tmp_path / "t"
    u = write_folder(folder, [30, 20])
    cr.PermutationBuilder(cr.open_table(u)).shuffle(seed=1).persist(perm_uri("p"))
    assert len(cr.open_permutations(perm_uri("p"))[0]) == 50
    target = folder / "part-00001.parquet"
    if change == "overwrite":
        pq.write_table(rollouts(30, 21), target)
    else:
        target.unlink()
    with pytest.raises(cr.ChangedError, match=r"part-00001\.parquet"):
        cr.open_permutations(perm_uri("p"))


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("configure", "match"),
    [
        (lambda b: b.filter("nope > 1"), "nope"),
        (lambda b: b.filter("reward > 0 AND meta.turn = 1"), "meta"),
        (lambda b: b.filter("reward > 'abc'"), "reward|mismatch|compare"),
        (lambda b: b.filter("reward >"), "syntax"),
        (lambda b: b.filter("reward > 0 AND AND role = 'user'"), "syntax|AND"),
        (lambda b: b.filter("id + 1"), "boolean"),
        (lambda b: b.split_random(counts=[500, 101]), "601|600"),
        (lambda b: b.split_sequential(counts=[601]), "601|600"),
        (lambda b: b.split_random(ratios=[0.6, 0.5]), "sum|1"),
        (
            lambda b: b.split_random(ratios=[1.5]),
            "ratios\\[0\\] must be a number in \\[0.0, 1.0\\]",
        ),
        (lambda b: b.split_random(fixed=601), "601|600"),
        (lambda b: b.split_random(ratios=[0.5], counts=[1]), "exactly one"),
        (lambda b: b.split_hash(["nope"], [1, 1]), "nope"),
        (lambda b: b.split_hash(["id"], [1, -1]), "weights\\[1\\] must be an integer >= 0, got -1"),
        (lambda b: b.split_hash(["id"], [0.95, 0.05]), "integer shares, e.g. \\[95, 5\\]"),
        (lambda b: b.split_hash(["id"], [0, 0]), "sum to 0"),
        (lambda b: b.split_calculated("reward > 0", split_names=["a"]), "integer"),
        (lambda b: b.split_calculated("nope % 2", split_names=["a", "b"]), "nope"),
        (lambda b: b.split_random(ratios=[0.5, 0.5], split_names=["a"]), "names"),
        (lambda b: b.split_random(ratios=[0.5, 0.5], split_names=["a", "a"]), "distinct"),
        (lambda b: b.shuffle(seed=1, clump_size=-2), "clump_size must be an integer >= 1, got -2"),
        (lambda b: b.shuffle(seed=-1), "seed must be an integer in \\[0, 18446744073709551615\\]"),
    ],
)
def test_bad_builds(
    rollouts_uri: str,
    perm_uri: Callable[[str], str],
    configure: Callable[[cr.PermutationBuilder], object],
    match: str,
) -> None:
    builder = cr.PermutationBuilder(cr.open_table(rollouts_uri))
    # Each argument's type and range are checked as it is given; the rest
    # (against the table, the rows kept) when persisting.
    with pytest.raises(cr.InvalidArgumentError, match=match):
        configure(builder).persist(perm_uri("p"), progress=False)  # type: ignore[attr-defined]
    with pytest.raises(cr.NotFoundError):  # nothing was written
        cr.open_permutations(perm_uri("p"))


def test_builder_misuse(rollouts_uri: str) -> None:
    with pytest.raises(TypeError, match="Table"):
        cr.PermutationBuilder(rollouts_uri)  # type: ignore[arg-type]
    builder = cr.PermutationBuilder(cr.open_table(rollouts_uri)).split_random(ratios=[1.0])
    with pytest.raises(cr.InvalidArgumentError, match="split"):
        builder.split_hash(["id"], [1])


def test_empty_split_cannot_be_streamed(rollouts_uri: str, perm_uri: Callable[[str], str]) -> None:
    perms = (
        cr.PermutationBuilder(cr.open_table(rollouts_uri))
        .filter("id < 0")
        .shuffle(seed=2)
        .persist(perm_uri("p"))
    )
    assert len(perms["all"]) == 0
    assert perms["all"].row_ids().tolist() == []
    assert perms.provenance["rows_kept"] == 0
    with pytest.raises(cr.InvalidArgumentError, match="0 rows"):
        cr.StreamingDataset(perms["all"], global_batch_size=4, num_splits=2)


# -- dealing from a permutation --------------------------------------------------------------


@pytest.fixture(scope="module")
def shuffled(table_uri: str, tmp_path_factory: pytest.TempPathFactory) -> cr.Permutations:
    """The shared conftest table (ids = row ids), filtered, split and shuffled."""
    return (
        cr.PermutationBuilder(cr.open_table(table_uri))
        .filter("flag = FALSE OR id < 100")
        .split_random(ratios=[0.9, 0.1], seed=4, split_names=["train", "val"])
        .shuffle(seed=8)
        .persist(uri(tmp_path_factory.mktemp("perm") / "p"), progress=False)
    )


def numpy_batches(ds: object) -> list[list[int]]:
    return [batch["id"].tolist() for batch in ds]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("s", "g", "w"), [(8, 16, 1), (8, 16, 2), (7, 21, 1), (5, 5, 5)])
def test_streaming_deals_the_split(shuffled: cr.Permutations, s: int, g: int, w: int) -> None:
    train = shuffled["train"]
    order = train.row_ids().tolist()
    m = len(order)
    dealt: set[int] = set()
    for r in range(w):
        ds = cr.StreamingDataset(
            train, global_batch_size=g, num_splits=s, rank=r, world_size=w, format="numpy"
        )
        got = numpy_batches(ds)
        assert got == ref.rank_batches(order, s, g, w, r, True)  # epoch 0: the persisted order
        for batch in got:
            dealt.update(batch)
    steps = ref.steps_per_epoch(m, s, g, True)
    assert dealt == set().union(*ref.global_steps(order, s, g, True))
    assert len(dealt) == steps * g
    # no drop_last: every row but the remainder of floor(M / S) streams
    ds = cr.StreamingDataset(train, global_batch_size=g, num_splits=s, drop_last=False)
    union = [i for batch in ds for i in batch["id"].tolist()]
    assert sorted(union) == sorted(order[: (m // s) * s])

    later = cr.StreamingDataset(train, global_batch_size=g, num_splits=s, format="numpy", epoch=1)
    ids = [i for batch in numpy_batches(later) for i in batch]
    assert len(ids) == len(set(ids)) == steps * g
    assert set(ids) <= set(order)


def test_spawned_workers_deal_like_the_main_process(shuffled: cr.Permutations) -> None:
    def dataset() -> cr.StreamingDataset:
        return cr.StreamingDataset(
            shuffled["train"], global_batch_size=12, num_splits=6, columns=["id"]
        )

    expected = numpy_batches(torch.utils.data.DataLoader(dataset(), batch_size=None))
    loader = torch.utils.data.DataLoader(
        dataset(), batch_size=None, num_workers=2, multiprocessing_context="spawn"
    )
    assert numpy_batches(loader) == expected
    assert len(expected) == len(shuffled["train"]) // 12


def test_pickle(shuffled: cr.Permutations) -> None:
    copy = pickle.loads(pickle.dumps(shuffled))
    assert (copy.id, copy.uri, copy.names) == (shuffled.id, shuffled.uri, shuffled.names)
    assert ids_of(copy) == ids_of(shuffled)
    val = pickle.loads(pickle.dumps(shuffled["val"]))
    assert (val.name, val.id, len(val)) == ("val", shuffled["val"].id, len(shuffled["val"]))
    assert val.row_ids(3, 9).tolist() == shuffled["val"].row_ids(3, 9).tolist()
    assert val.provenance == shuffled["val"].provenance
    reopened = cr.open_permutations(shuffled.uri)
    assert reopened.id == shuffled.id
    assert reopened.provenance == shuffled.provenance


# -- progress and statistics ---------------------------------------------------------------


@pytest.mark.parametrize("sql", [None, "reward < 0.3"])
def test_progress(rollouts_uri: str, perm_uri: Callable[[str], str], sql: str | None) -> None:
    calls: list[tuple[str, int, int]] = []
    builder = cr.PermutationBuilder(cr.open_table(rollouts_uri)).split_random(
        ratios=[0.5, 0.25], seed=1
    )
    if sql:
        builder.filter(sql)
    perms = builder.persist(
        perm_uri("p"), progress=lambda phase, done, total: calls.append((phase, done, total))
    )
    phases = [c[0] for c in calls]
    assert set(phases) == {"scan", "order", "write"}
    assert phases == sorted(phases, key=["scan", "order", "write"].index)  # one after the other
    scans = [c for c in calls if c[0] == "scan"]
    orders = [c for c in calls if c[0] == "order"]
    writes = [c for c in calls if c[0] == "write"]
    assert scans[-1] == ("scan", 600, 600)
    written = sum(len(s) for s in perms)
    assert orders[-1] == ("order", written, written)
    assert writes[-1] == ("write", written, written)
    for phase in (scans, orders, writes):
        dones = [c[1] for c in phase]
        assert dones == sorted(dones)
        assert all(0 <= d <= t for _, d, t in phase)


def test_progress_shown(
    rollouts_uri: str, perm_uri: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    builder = cr.PermutationBuilder(cr.open_table(rollouts_uri)).filter("reward < 0.3")
    builder.persist(perm_uri("p"), progress=True)
    err = capsys.readouterr().err
    assert "scan" in err
    assert "write" in err
    assert "kept" in err  # the rows the filter kept, beside the rows scanned


def test_build_memory(rollouts_uri: str, perm_uri: Callable[[str], str]) -> None:
    def builder() -> cr.PermutationBuilder:
        return cr.PermutationBuilder(cr.open_table(rollouts_uri)).shuffle(seed=4)

    small = builder().persist(perm_uri("small"), build_memory=256 << 20)
    assert small.id == builder().persist(perm_uri("default")).id  # memory never changes it
    with pytest.raises(cr.InvalidArgumentError, match="below the"):
        builder().persist(perm_uri("tiny"), build_memory=1 << 20)


def test_row_groups_skipped_by_statistics(tmp_path: Path, perm_uri: Callable[[str], str]) -> None:
    u = write_folder(tmp_path / "t", [400, 600], row_group_size=100)  # sorted by id
    data = read_folder(u)
    sql = "id >= 250 AND id < 480 AND reward > 0"
    perms = cr.PermutationBuilder(cr.open_table(u)).filter(sql).persist(perm_uri("p"))
    prov = perms.provenance
    assert prov["row_groups"] == 10
    # groups [0, 100), [100, 200) and everything from 500 on cannot match
    assert prov["row_groups_skipped"] == 7
    mask = pc.and_kleene(
        pc.and_kleene(pc.greater_equal(data["id"], 250), pc.less(data["id"], 480)),
        pc.greater(data["reward"], 0),
    )
    assert perms[0].row_ids().tolist() == kept(data, mask)

    perms = cr.PermutationBuilder(cr.open_table(u)).filter("reward > 0").persist(perm_uri("q"))
    assert perms.provenance["row_groups_skipped"] == 0
    assert perms[0].row_ids().tolist() == kept(data, pc.greater(data["reward"], 0))


def test_provenance_records_the_build_time(
    rollouts_uri: str, perm_uri: Callable[[str], str]
) -> None:
    perms = cr.PermutationBuilder(cr.open_table(rollouts_uri)).persist(perm_uri("p"), False)
    prov = cr.open_permutations(perm_uri("p")).provenance
    assert prov["built_at"].startswith("20")
    assert prov["build_seconds"] >= 0
    assert prov["id"] == perms.id
