"""Every public entry point checks its arguments (docs/spec.md, "Errors").

Generated bad values (wrong types, negative, too large, fractional, NaN)
given to each argument raise ``InvalidArgumentError`` naming the argument,
the value and what is allowed; no message from the core ever holds Go's
words (panics, stacks, type names); a filter nested a million levels deep is
refused with a clear error instead of overflowing the stack.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from conftest import rows, uri
from hypothesis import given, settings

import croupier as cr
from croupier import _lib

# Go's words that must never reach a user: panics, stacks, Go type names
# (Arrow's type names, int32 or list<item: float>, are the user's own).
GO_WORDS = re.compile(
    r"panic|goroutine|Go struct|Go value|(^|\s)json: |strconv\.|sqlparser"
    r"|\*[a-z]+\.[A-Z]|\*errors\.|\bmain\.[A-Z]|\[\][a-z]|map\[|interface \{|\.go:\d+"
)

# Deterministic and hermetic: no example database, the same examples every run.
checked = settings(max_examples=25, deadline=None, derandomize=True, database=None)

# Values no integer argument takes: floats, booleans, strings, containers, NaN.
not_integers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=5),
    st.lists(st.integers(), max_size=2),
    st.just(None),
)


def negative() -> st.SearchStrategy[int]:
    return st.integers(max_value=-1)


def beyond(limit: int) -> st.SearchStrategy[int]:
    return st.integers(min_value=limit + 1, max_value=2**200)


def assert_names(exc: BaseException, name: str, value: Any) -> None:
    """The message names the argument, the value given, and what is allowed."""
    message = str(exc)
    assert name in message, message
    shown = repr(value) if not isinstance(value, int) or isinstance(value, bool) else str(value)
    assert shown[:40] in message, (shown, message)
    assert "must be" in message, message
    assert not GO_WORDS.search(message), message


@pytest.fixture(scope="module")
def tbl(tmp_path_factory: pytest.TempPathFactory) -> cr.Table:
    folder = tmp_path_factory.mktemp("validation") / "t"
    cr.create_table(uri(folder), rows(0, 64))
    return cr.open_table(uri(folder))


def bad_integers(low: int, high: int) -> st.SearchStrategy[Any]:
    outside = [st.integers(max_value=low - 1), beyond(high)]
    return st.one_of(not_integers.filter(lambda v: v is not None), *outside)


DATASET_ARGUMENTS: dict[str, tuple[int, int]] = {
    "global_batch_size": (1, 2**63 - 1),
    "num_splits": (1, 2**63 - 1),
    "rank": (0, 2**63 - 1),
    "world_size": (1, 2**63 - 1),
    "shuffle_seed": (0, 2**64 - 1),
    "epoch": (0, 2**63 - 1),
    "read_ahead": (1, 2**63 - 1),
    "memory_budget": (1, 2**63 - 1),
    "max_reads": (1, 2**63 - 1),
}


@pytest.mark.parametrize("name", sorted(DATASET_ARGUMENTS))
def test_dataset_arguments(tbl: cr.Table, name: str) -> None:
    low, high = DATASET_ARGUMENTS[name]

    @checked
    @given(bad_integers(low, high))
    def check(value: Any) -> None:
        kwargs: dict[str, Any] = {"global_batch_size": 8, name: value}
        with pytest.raises(cr.InvalidArgumentError) as info:
            cr.StreamingDataset(tbl, **kwargs)
        assert_names(info.value, name, value)

    check()


def builder_calls(
    tbl: cr.Table,
) -> dict[str, tuple[Callable[[Any], object], st.SearchStrategy[Any]]]:
    """Each builder argument: a call giving it a value, and values it refuses."""
    b = lambda: cr.PermutationBuilder(tbl)  # noqa: E731 - a fresh builder per call
    ratios = st.one_of(
        st.floats(max_value=-1e-9), st.floats(min_value=1.0 + 1e-9), st.just(math.nan)
    )
    return {
        "ratios[0]": (lambda v: b().split_random(ratios=[v]), ratios),
        "counts[0]": (lambda v: b().split_random(counts=[v]), bad_integers(0, 2**63 - 1)),
        "fixed": (
            lambda v: b().split_random(fixed=v),
            bad_integers(1, 2**63 - 1).filter(lambda v: v is not None),
        ),
        "seed": (lambda v: b().split_random(ratios=[1.0], seed=v), bad_integers(0, 2**64 - 1)),
        "clump_size": (lambda v: b().shuffle(seed=0, clump_size=v), bad_integers(1, 2**63 - 1)),
        "window": (lambda v: b().shuffle(seed=0, window=v), bad_integers(1, 2**63 - 1)),
        "weights[0]": (
            lambda v: b().split_hash(["id"], [v]),
            bad_integers(0, 2**63 - 1).filter(lambda v: not isinstance(v, float)),
        ),
        "discard_weight": (
            lambda v: b().split_hash(["id"], [1], discard_weight=v),
            bad_integers(0, 2**63 - 1),
        ),
    }


@pytest.mark.parametrize(
    "name",
    [
        "ratios[0]",
        "counts[0]",
        "fixed",
        "seed",
        "clump_size",
        "window",
        "weights[0]",
        "discard_weight",
    ],
)
def test_builder_arguments(tbl: cr.Table, name: str) -> None:
    call, values = builder_calls(tbl)[name]

    @checked
    @given(values)
    def check(value: Any) -> None:
        with pytest.raises(cr.InvalidArgumentError) as info:
            call(value)
        assert_names(info.value, name, value)

    check()


@checked
@given(st.one_of(bad_integers(1, 4096), st.just(0)))
def test_init_arguments(value: Any) -> None:
    with pytest.raises(cr.InvalidArgumentError) as info:
        cr.init(gomaxprocs=value)
    assert_names(info.value, "gomaxprocs", value)


def test_table_arguments(tmp_path: Path, tbl: cr.Table) -> None:
    @checked
    @given(bad_integers(1, 2**63 - 1))
    def check(value: Any) -> None:
        with pytest.raises(cr.InvalidArgumentError) as info:
            cr.create_table(uri(tmp_path / "new"), rows(0, 4), row_group_rows=value)
        assert_names(info.value, "row_group_rows", value)
        with pytest.raises(cr.InvalidArgumentError) as info:
            cr.cleanup(tbl.uri, keep_last=value)
        assert_names(info.value, "keep_last", value)

    check()
    for grace in (-1.0, math.nan, math.inf, "1"):
        with pytest.raises(cr.InvalidArgumentError) as info:
            cr.cleanup(tbl.uri, keep_last=1, grace=grace)  # type: ignore[arg-type]
        assert_names(info.value, "grace", grace)


def test_checkpoint_fields(tbl: cr.Table) -> None:
    """A checkpoint's position must lie inside the epoch it names."""
    ds = cr.StreamingDataset(tbl, global_batch_size=8)  # 8 steps an epoch
    good = ds.state_dict()

    @checked
    @given(st.one_of(bad_integers(0, 8), st.sampled_from([9, 101, 10**18])))
    def check(value: Any) -> None:
        with pytest.raises(cr.InvalidArgumentError) as info:
            ds.load_state_dict({**good, "steps_consumed": value})
        if isinstance(value, int) and not isinstance(value, bool) and value < 2**63:
            assert_names(info.value, "steps_consumed", value)
            if value > 0:
                assert "of an epoch of 8 steps" in str(info.value)
        else:  # named by its JSON type and value where JSON carries it
            message = str(info.value)
            assert "steps_consumed" in message
            assert "must be" in message
            assert not GO_WORDS.search(message)
            if isinstance(value, bool):
                assert f"is bool {json.dumps(value)}" in message, message
            elif isinstance(value, list):
                assert f"is array {json.dumps(value, separators=(',', ':'))}" in message, message
            elif isinstance(value, str) and value.isascii() and value.isprintable():
                assert f"is string {json.dumps(value)}" in message, message

    check()
    with pytest.raises(cr.InvalidArgumentError, match="epoch must be an integer >= 0, got -1"):
        ds.load_state_dict({**good, "epoch": -1})
    ds.load_state_dict({**good, "epoch": 3, "steps_consumed": 8})  # the end of epoch 3
    assert (ds.epoch, ds.steps_consumed) == (4, 0)
    ds.load_state_dict({**good, "steps_consumed": 7})
    assert (ds.epoch, ds.steps_consumed) == (0, 7)


def test_unknown_option_keys_at_the_abi(tbl: cr.Table) -> None:
    """The C ABI refuses a misspelt option key, naming the nearest valid one."""
    with pytest.raises(
        cr.InvalidArgumentError,
        match=r'unknown key "memory_budgt" \(did you mean "memory_budget"\?\)',
    ):
        _lib.dataset_open(tbl._handle(), {"global_batch_size": 8, "memory_budgt": 1})
    with pytest.raises(
        cr.InvalidArgumentError,
        match=r'"global_batch_size" is number 1e\+30, but it must be an integer',
    ):
        _lib.dataset_open(tbl._handle(), {"global_batch_size": 1e30})


def go_messages(tmp_path: Path, tbl: cr.Table) -> list[BaseException]:
    """Errors of every class the core raises that a test can provoke."""
    caught: list[BaseException] = []

    def catch(fn: Callable[[], object]) -> None:
        try:
            fn()
        except cr.CroupierError as exc:
            caught.append(exc)
        else:
            raise AssertionError(f"{fn} did not raise")

    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "junk.parquet").write_bytes(b"not parquet" * 20)
    b = lambda: cr.PermutationBuilder(tbl)  # noqa: E731
    perm = str(tmp_path / "p")
    catch(lambda: cr.open_table(uri(tmp_path / "nowhere")))  # NotFound
    catch(lambda: cr.open_table(uri(folder)))  # Corrupt
    catch(lambda: cr.create_table(tbl.uri, rows(0, 4)))  # AlreadyExists
    catch(lambda: _lib.table_pin(9_999_999))  # Closed
    catch(lambda: cr.open_table(tbl.uri, version=99))  # NotFound
    catch(lambda: b().filter("text ->> '$.a' = 'x'").persist("file://" + perm))
    catch(lambda: b().filter("CASE WHEN id > 0 THEN 1 END = 1").persist("file://" + perm))
    catch(lambda: b().filter("NOT " * 20_000 + "flag").persist("file://" + perm))
    catch(lambda: b().split_hash(["id"], [0, 0]).persist("file://" + perm))
    catch(lambda: b().split_hash(["tokens"], [1]).persist("file://" + perm))
    catch(lambda: b().split_random(counts=[2**62, 2**62]).persist("file://" + perm))
    catch(lambda: cr.StreamingDataset(tbl, global_batch_size=8, num_splits=3))
    catch(lambda: cr.StreamingDataset(tbl, global_batch_size=8, rank=5, world_size=2))
    catch(lambda: _lib.stream_open(9_999_999, {}))
    catch(lambda: cr.rewrite(tbl, tbl.uri))
    return caught


def test_no_go_words_reach_python(tmp_path: Path, tbl: cr.Table) -> None:
    caught = go_messages(tmp_path, tbl)
    codes = {exc.code for exc in caught}  # type: ignore[attr-defined]
    assert {2, 3, 4, 7, 9} <= codes, codes
    for exc in caught:
        assert not GO_WORDS.search(str(exc)), str(exc)
        assert str(exc).strip(), exc


DEEP = """
import sys
import croupier as cr
tbl = cr.open_table(sys.argv[1])
text = {text}
try:
    cr.PermutationBuilder(tbl).filter(text).persist(sys.argv[2], progress=False)
except cr.InvalidArgumentError as exc:
    print(str(exc)[:300])
    sys.exit(0)
sys.exit(3)
"""


@pytest.mark.parametrize(
    "text",
    [
        '"NOT " * 10**6 + "flag"',
        '"NOT " * 10**5 + "flag"',
        '"id" + " + 0" * 10**6 + " > 0"',
        '"id" + " + 0" * 10**5 + " > 0"',
        '"(" * 10**6 + "flag" + ")" * 10**6',
        '"- " * 10**6 + "id > 0"',
    ],
)
def test_deep_filter_in_a_child(tmp_path: Path, tbl: cr.Table, text: str) -> None:
    """A filter a million levels deep ends the child with a clear error, not Go's
    fatal stack overflow (which no recover catches and kills the process)."""
    script = textwrap.dedent(DEEP.format(text=text))
    run = subprocess.run(
        [sys.executable, "-c", script, tbl.uri, uri(tmp_path / "p")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert "more than 10000 operators" in run.stdout or "bytes long, more than" in run.stdout, (
        run.stdout
    )
    assert not GO_WORDS.search(run.stdout), run.stdout


def test_paths_are_taken_wherever_a_uri_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pathlib.Path or a plain local path, relative or absolute, names the
    file:// URI of its absolute path, as the croupier command takes it."""
    monkeypatch.chdir(tmp_path)
    want = uri(tmp_path / "t")
    assert cr.create_table(tmp_path / "t", rows(0, 16)).uri == want
    assert cr.open_table("t").uri == want
    assert cr.open_table(str(tmp_path / "t")).uri == want
    tbl = cr.open_table(Path("t"), catalog=tmp_path / "catalog.db")
    assert tbl.uri == want
    assert cr.rewrite(Path("t"), Path("copy")).uri == uri(tmp_path / "copy")
    cr.PermutationBuilder(tbl).shuffle(seed=1).persist(Path("perm"))
    assert cr.open_permutations("perm").uri == uri(tmp_path / "perm")
    cr.register("t", Path("t"), catalog=Path("catalog.db"))
    assert cr.lookup("t", catalog=tmp_path / "catalog.db") == want
    assert cr.cleanup(Path("t"), keep_last=1)["deleted_versions"] == []
    with pytest.raises(cr.InvalidArgumentError, match=r"uri must be a string, got 3 \(int\)"):
        cr.open_table(3)  # type: ignore[arg-type]


def test_torch_dataloader_with_a_batch_size_is_refused(tbl: cr.Table) -> None:
    """torch's DataLoader batches what a dataset yields, 1 at a time by
    default: a croupier dataset yields whole batches and says how to load it."""
    torch_data = pytest.importorskip("torch.utils.data")
    ds = cr.StreamingDataset(tbl, global_batch_size=8)
    for options in ({}, {"batch_size": 32}):
        with pytest.raises(cr.InvalidArgumentError, match="batch_size=None") as info:
            next(iter(torch_data.DataLoader(ds, **options)))
        assert "croupier.DataLoader(dataset)" in str(info.value)
    batch = next(iter(torch_data.DataLoader(ds, batch_size=None)))
    first = next(iter(cr.StreamingDataset(tbl, global_batch_size=8)))
    assert batch["id"].tolist() == first["id"].tolist()


def test_default_num_splits_and_world_size_say_where_they_came_from(tbl: cr.Table) -> None:
    with pytest.raises(cr.InvalidArgumentError) as info:
        cr.StreamingDataset(tbl, global_batch_size=64, rank=0, world_size=3)
    assert "num_splits 64 (its default, global_batch_size) is not a multiple of world_size 3" in (
        str(info.value)
    )
    assert "global_batch_size must be a multiple of world_size" in str(info.value)


def test_a_following_state_is_not_a_streaming_one(tmp_path: Path, tbl: cr.Table) -> None:
    follow = cr.FollowingDataset(tbl, cr.Follow(wait_timeout=0.01), global_batch_size=8)
    ds = cr.StreamingDataset(tbl, global_batch_size=8)
    want = r"following's \(kind \"follow\"\).*FollowingDataset"
    with pytest.raises(cr.InvalidArgumentError, match=want):
        ds.load_state_dict(follow.state_dict())
