"""Filters on timestamps, dates and decimals keep the rows pyarrow.compute selects.

Hypothesis draws a table (timestamps of every unit, one with a time zone, date32,
date64, two decimal128 columns and a decimal256 one, all with nulls; ``created_at``
sorted so that row group statistics rule some groups out) and predicates, each as SQL text with
the equivalent pyarrow.compute evaluation: pyarrow compares the columns with
scalars of its own types (it casts to the finer unit, reads a date as its
midnight and compares decimals at a common scale), so the two sides share no
code. The rows a permutation keeps must be exactly those where pyarrow's result
is true.
"""

from __future__ import annotations

import datetime as dt
import itertools
import tempfile
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from conftest import uri
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_filter_parity import Eval, Term, Values

import croupier as cr

ROW_GROUP = 16
BASE = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
STEP = dt.timedelta(
    minutes=30
)  # table values and literals lie on this grid, give or take a fraction
TIMESTAMPS = {
    "created_at": pa.timestamp("us", tz="UTC"),
    "t_s": pa.timestamp("s"),
    "t_ms": pa.timestamp("ms", tz="America/New_York"),
    "t_ns": pa.timestamp("ns"),
}
DATES = {"day": pa.date32(), "day64": pa.date64()}
DECIMALS = {
    "price": pa.decimal128(9, 2),
    "amount": pa.decimal128(20, 4),
    "wide": pa.decimal256(40, 6),
}


def make_table(seed: int, n: int) -> pa.Table:
    """Random rows with nulls in every column; ``created_at`` and ``day`` are sorted."""
    rng = np.random.default_rng(seed)

    def nulls(p: float = 0.15) -> np.ndarray:
        return rng.random(n) < p

    def instants(sort: bool = False) -> list[dt.datetime]:
        steps = rng.integers(0, 200, size=n)
        micros = rng.integers(0, 1_000_000, size=n) * (rng.random(n) < 0.3)
        if sort:
            steps, micros = np.sort(steps), np.zeros(n, dtype=np.int64)
        return [
            BASE + int(k) * STEP + dt.timedelta(microseconds=int(u))
            for k, u in zip(steps, micros, strict=True)
        ]

    created = instants(sort=True)
    columns: dict[str, pa.Array] = {
        "created_at": pa.array(created, TIMESTAMPS["created_at"], mask=nulls(0.05)),
        "day": pa.array([c.date() for c in created], pa.date32(), mask=nulls(0.05)),
        "day64": pa.array([c.date() for c in instants()], pa.date64(), mask=nulls()),
        # whole seconds, naive (UTC)
        "t_s": pa.array(
            [v.replace(microsecond=0, tzinfo=None) for v in instants()],
            TIMESTAMPS["t_s"],
            mask=nulls(),
        ),
        # whole milliseconds, in a zone (Arrow stores the UTC instant)
        "t_ms": pa.array(
            [v.replace(microsecond=v.microsecond // 1000 * 1000) for v in instants()],
            TIMESTAMPS["t_ms"],
            mask=nulls(),
        ),
        "t_ns": pa.array(
            [v.replace(tzinfo=None) for v in instants()], TIMESTAMPS["t_ns"], mask=nulls()
        ),
    }
    for name, typ in DECIMALS.items():
        # few distinct values, so that literals land on and next to them
        units = rng.integers(-DECIMAL_UNITS, DECIMAL_UNITS + 1, size=n)
        columns[name] = pa.array(
            [Decimal(int(u)).scaleb(-typ.scale) for u in units], typ, mask=nulls()
        )
    return pa.table(columns)


def column(name: str) -> Term:
    return Term(name, lambda t: t[name])


def instant_scalar(value: dt.datetime, name: str) -> pa.Scalar:
    """``value`` as a pyarrow scalar comparable with column ``name``: in its zone, or naive UTC."""
    tz = TIMESTAMPS[name].tz if name in TIMESTAMPS else None
    if tz is None:
        return pa.scalar(value.astimezone(dt.UTC).replace(tzinfo=None), pa.timestamp("us"))
    return pa.scalar(value, pa.timestamp("us", tz=tz))


@st.composite
def instants(draw: st.DrawFn) -> dt.datetime:
    micros = draw(st.sampled_from([0, 0, 0, 1, 500_000, 999_999]))
    return BASE + draw(st.integers(-5, 205)) * STEP + dt.timedelta(microseconds=micros)


@st.composite
def instant_literal(draw: st.DrawFn) -> tuple[str, dt.datetime]:
    """An instant written as SQL in one of the ways the dialect takes, and its value."""
    value = draw(instants())
    form = draw(st.sampled_from(["timestamp", "string", "offset", "interval"]))
    if form == "interval":
        hours = draw(st.integers(-30, 30))
        base = value + dt.timedelta(hours=hours)
        return f"(TIMESTAMP '{base:%Y-%m-%d %H:%M:%S.%f}' - INTERVAL {hours} HOUR)", value
    if form == "offset":
        local = value.astimezone(dt.timezone(dt.timedelta(hours=5, minutes=30)))
        return f"TIMESTAMP '{local:%Y-%m-%d %H:%M:%S.%f}+05:30'", value
    text = f"{value:%Y-%m-%d %H:%M:%S}" + (f".{value.microsecond:06d}" if value.microsecond else "")
    return (f"TIMESTAMP '{text}'" if form == "timestamp" else f"'{text}'"), value


COMPARISONS = {
    "=": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}


@st.composite
def time_comparison(draw: st.DrawFn) -> Term:
    name = draw(st.sampled_from(sorted(TIMESTAMPS)))
    op = draw(st.sampled_from(sorted(COMPARISONS)))
    sql, value = draw(instant_literal())
    target = column(name)
    if draw(st.booleans()):  # shift the column instead
        minutes = draw(st.integers(-90, 90))
        sign = draw(st.sampled_from(["+", "-"]))
        delta = dt.timedelta(minutes=minutes if sign == "+" else -minutes)
        target = Term(
            f"({name} {sign} INTERVAL {minutes} MINUTE)",
            lambda t: pc.add(t[name], pa.scalar(delta, pa.duration("us"))),
        )
    if draw(st.booleans()):
        return Term(
            f"({sql} {op} {target.sql})",
            lambda t: COMPARISONS[op](instant_scalar(value, name), target.eval(t)),
        )
    return Term(
        f"({target.sql} {op} {sql})",
        lambda t: COMPARISONS[op](target.eval(t), instant_scalar(value, name)),
    )


def date_scalar(day: dt.date, name: str) -> pa.Scalar:
    return pa.scalar(day, DATES[name])


@st.composite
def date_comparison(draw: st.DrawFn) -> Term:
    name = draw(st.sampled_from(sorted(DATES)))
    op = draw(st.sampled_from(sorted(COMPARISONS)))
    day = (BASE + draw(st.integers(-1, 105)) * dt.timedelta(hours=2)).date()
    if draw(st.booleans()):
        sql = draw(st.sampled_from([f"DATE '{day}'", f"'{day}'"]))
        return Term(
            f"({name} {op} {sql})", lambda t: COMPARISONS[op](t[name], date_scalar(day, name))
        )
    # a date against a timestamp: the date is its midnight
    value = draw(instants())
    sql = f"TIMESTAMP '{value:%Y-%m-%d %H:%M:%S.%f}'"
    scalar = pa.scalar(value.replace(tzinfo=None), pa.timestamp("us"))
    return Term(f"({name} {op} {sql})", lambda t: COMPARISONS[op](t[name], scalar))


DECIMAL_UNITS = 40  # a decimal column holds -40 … 40 units of its last digit


@st.composite
def decimal_literal(draw: st.DrawFn, name: str) -> Decimal:
    """A value of column ``name``'s grid, or one up to 3 digits finer just beside it."""
    scale = DECIMALS[name].scale
    value = Decimal(draw(st.integers(-DECIMAL_UNITS - 2, DECIMAL_UNITS + 2))).scaleb(-scale)
    finer = draw(st.integers(0, 3))
    if finer:
        value += Decimal(draw(st.integers(-9, 9))).scaleb(-scale - finer)
    if draw(st.integers(0, 3)) == 0:
        value = value.quantize(Decimal(1)) if scale else value  # an integer literal
    return value


@st.composite
def decimal_comparison(draw: st.DrawFn) -> Term:
    name = draw(st.sampled_from(sorted(DECIMALS)))
    op = draw(st.sampled_from(sorted(COMPARISONS)))
    value = draw(decimal_literal(name))
    sql = format(value, "f")
    return Term(f"({name} {op} {sql})", lambda t: COMPARISONS[op](t[name], pa.scalar(value)))


def any_of(target: str, scalars: list[pa.Scalar | None], typ: pa.DataType) -> Eval:
    """x IN (...) as SQL has it: x = a OR x = b OR ..., NULL items included."""

    def evaluate(t: pa.Table) -> Values:
        hits = [pc.equal(t[target], s if s is not None else pa.scalar(None, typ)) for s in scalars]
        out = hits[0]
        for h in hits[1:]:
            out = pc.or_kleene(out, h)
        return out

    return evaluate


@st.composite
def membership(draw: st.DrawFn) -> Term:
    negate = draw(st.booleans())
    with_null = draw(st.integers(0, 4)) == 0
    if draw(st.booleans()):
        name = draw(st.sampled_from(sorted(TIMESTAMPS)))
        drawn = draw(st.lists(instant_literal(), min_size=1, max_size=4))
        sqls = [s for s, _ in drawn]
        scalars: list[pa.Scalar | None] = [instant_scalar(v, name) for _, v in drawn]
        typ: pa.DataType = pa.timestamp("us", tz=TIMESTAMPS[name].tz)
    else:
        name = draw(st.sampled_from(sorted(DECIMALS)))
        values = draw(st.lists(decimal_literal(name), min_size=1, max_size=4))
        sqls = [format(v, "f") for v in values]
        scalars = [pa.scalar(v) for v in values]
        typ = DECIMALS[name]
    if with_null:
        sqls.append("NULL")
        scalars.append(None)
    evaluate = any_of(name, scalars, typ)
    word = "NOT IN" if negate else "IN"
    return Term(
        f"({name} {word} ({', '.join(sqls)}))",
        (lambda t: pc.invert(evaluate(t))) if negate else evaluate,
    )


@st.composite
def between(draw: st.DrawFn) -> Term:
    negate = draw(st.booleans())
    if draw(st.booleans()):
        name = draw(st.sampled_from(sorted(TIMESTAMPS)))
        (lo_sql, lo), (hi_sql, hi) = draw(instant_literal()), draw(instant_literal())
        lo_s, hi_s = instant_scalar(lo, name), instant_scalar(hi, name)
    else:
        name = draw(st.sampled_from(sorted(DECIMALS)))
        lo_d, hi_d = draw(decimal_literal(name)), draw(decimal_literal(name))
        lo_sql, hi_sql = format(lo_d, "f"), format(hi_d, "f")
        lo_s, hi_s = pa.scalar(lo_d), pa.scalar(hi_d)

    def evaluate(t: pa.Table) -> Values:
        inside = pc.and_kleene(pc.greater_equal(t[name], lo_s), pc.less_equal(t[name], hi_s))
        return pc.invert(inside) if negate else inside

    word = "NOT BETWEEN" if negate else "BETWEEN"
    return Term(f"({name} {word} {lo_sql} AND {hi_sql})", evaluate)


@st.composite
def null_test(draw: st.DrawFn) -> Term:
    name = draw(st.sampled_from(sorted([*TIMESTAMPS, *DATES, *DECIMALS])))
    if draw(st.booleans()):
        return Term(f"({name} IS NOT NULL)", lambda t: pc.is_valid(t[name]))
    return Term(f"({name} IS NULL)", lambda t: pc.is_null(t[name]))


leaves = st.one_of(
    time_comparison(), date_comparison(), decimal_comparison(), membership(), between(), null_test()
)


def combine(children: st.SearchStrategy[Term]) -> st.SearchStrategy[Term]:
    def logic(word: str, kernel: Callable[..., Values]) -> Callable[[Term, Term], Term]:
        return lambda a, b: Term(
            f"({a.sql} {word} {b.sql})", lambda t: kernel(a.eval(t), b.eval(t))
        )

    return st.one_of(
        st.builds(logic("AND", pc.and_kleene), children, children),
        st.builds(logic("OR", pc.or_kleene), children, children),
        children.map(lambda a: Term(f"(NOT {a.sql})", lambda t: pc.invert(a.eval(t)))),
    )


predicates = st.recursive(leaves, combine, max_leaves=4)


def expected_rows(data: pa.Table, predicate: Term) -> list[int]:
    mask = predicate.eval(data)
    return np.flatnonzero(pc.fill_null(mask, False).to_numpy(zero_copy_only=False)).tolist()


def kept(tbl: cr.Table, sql: str, root: Path) -> cr.Permutations:
    return cr.PermutationBuilder(tbl).filter(sql).persist(uri(root), progress=False)


@settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 120),
    preds=st.lists(st.one_of(leaves, predicates), min_size=1, max_size=8),
)
def test_time_filter_matches_pyarrow(seed: int, n: int, preds: list[Term]) -> None:
    data = make_table(seed, n)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "t"
        folder.mkdir()
        pq.write_table(data, folder / "part-0.parquet", row_group_size=ROW_GROUP)
        tbl = cr.open_table(uri(folder))
        for k, predicate in enumerate(preds):
            perms = kept(tbl, predicate.sql, Path(tmp) / f"p{k}")
            assert perms[0].row_ids().tolist() == expected_rows(data, predicate), predicate.sql
        tbl.close()


_counter = itertools.count()


@pytest.fixture(scope="module")
def fixed_table(tmp_path_factory: pytest.TempPathFactory) -> tuple[pa.Table, cr.Table, Path]:
    data = make_table(20261130, 300)
    folder = tmp_path_factory.mktemp("time") / "t"
    folder.mkdir()
    pq.write_table(data, folder / "part-0.parquet", row_group_size=ROW_GROUP)
    return data, cr.open_table(uri(folder)), folder.parent


def _utc(*args: int) -> pa.Scalar:
    return pa.scalar(dt.datetime(*args, tzinfo=dt.UTC), TIMESTAMPS["created_at"])


CASES: list[tuple[str, Eval]] = [
    (
        "created_at > TIMESTAMP '2026-11-03 00:00:00'",
        lambda t: pc.greater(t["created_at"], _utc(2026, 11, 3)),
    ),
    (
        "created_at >= TIMESTAMP '2026-11-04 02:00:00' - INTERVAL 2 HOUR",
        lambda t: pc.greater_equal(t["created_at"], _utc(2026, 11, 4)),
    ),
    ("day = DATE '2026-11-02'", lambda t: pc.equal(t["day"], pa.scalar(dt.date(2026, 11, 2)))),
    ("day < '2026-11-02'", lambda t: pc.less(t["day"], pa.scalar(dt.date(2026, 11, 2)))),
    (
        "coalesce(t_s, TIMESTAMP '2000-01-01') < '2026-11-01 12:00:00'",
        lambda t: pc.less(
            pc.coalesce(t["t_s"], pa.scalar(dt.datetime(2000, 1, 1), TIMESTAMPS["t_s"])),
            pa.scalar(dt.datetime(2026, 11, 1, 12), TIMESTAMPS["t_s"]),
        ),
    ),
    (
        "coalesce(day64, DATE '2026-11-02') = '2026-11-02'",
        lambda t: pc.equal(
            pc.coalesce(t["day64"], pa.scalar(dt.date(2026, 11, 2), pa.date64())),
            pa.scalar(dt.date(2026, 11, 2), pa.date64()),
        ),
    ),
    ("price > 0.25", lambda t: pc.greater(t["price"], pa.scalar(Decimal("0.25")))),
    ("price > 0.249", lambda t: pc.greater(t["price"], pa.scalar(Decimal("0.249")))),
    ("price >= 0.255", lambda t: pc.greater_equal(t["price"], pa.scalar(Decimal("0.255")))),
    ("price <= -0.001", lambda t: pc.less_equal(t["price"], pa.scalar(Decimal("-0.001")))),
    ("amount = 0.003", lambda t: pc.equal(t["amount"], pa.scalar(Decimal("0.003")))),
    ("amount < -0.00015", lambda t: pc.less(t["amount"], pa.scalar(Decimal("-0.00015")))),
    (
        "coalesce(price, 0.1) >= 0.1",
        lambda t: pc.greater_equal(
            pc.coalesce(t["price"], pa.scalar(Decimal("0.10"), DECIMALS["price"])),
            pa.scalar(Decimal("0.1")),
        ),
    ),
    ("wide != 0.0000101", lambda t: pc.not_equal(t["wide"], pa.scalar(Decimal("0.0000101")))),
    ("wide >= -0.0000005", lambda t: pc.greater_equal(t["wide"], pa.scalar(Decimal("-0.0000005")))),
]


@pytest.mark.parametrize(("sql", "evaluate"), CASES, ids=[c[0] for c in CASES])
def test_hand_picked_time_filter(
    fixed_table: tuple[pa.Table, cr.Table, Path], sql: str, evaluate: Eval
) -> None:
    data, tbl, root = fixed_table
    perms = kept(tbl, sql, root / f"p{next(_counter)}")
    assert perms[0].row_ids().tolist() == expected_rows(data, Term(sql, evaluate))
    if sql.startswith(("created_at", "day ")):
        assert perms.provenance["row_groups_skipped"] > 0


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("created_at > now() - INTERVAL 2 HOUR", "now() reads the clock"),
        ("created_at > CURRENT_TIMESTAMP", "write the instant as TIMESTAMP"),
        (
            "created_at > TIMESTAMP '2026-11-01' - INTERVAL 1 MONTH",
            "INTERVAL n MONTH is not supported",
        ),
        ("EXTRACT(DAY FROM created_at) = 1", "EXTRACT is not supported"),
        ("CAST(price AS DOUBLE) > 1", "CAST is not supported"),
        ("created_at > 'soon'", "is not a timestamp"),
    ],
)
def test_refused(fixed_table: tuple[pa.Table, cr.Table, Path], sql: str, message: str) -> None:
    _, tbl, root = fixed_table
    with pytest.raises(
        cr.InvalidArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")
    ):
        kept(tbl, sql, root / f"p{next(_counter)}")


def test_hash_split_on_instants_and_decimals(tmp_path: Path) -> None:
    """A hash split on a timestamp and a decimal puts each row in the split its values
    choose, whatever the timestamp's unit and zone (a date being its midnight) and the
    decimal's scale: the same moments and values, written four ways, split alike."""
    rng = np.random.default_rng(5)
    n = 400
    moments = [BASE + int(k) * STEP for k in rng.integers(0, 2000, size=n)]
    units = [int(u) for u in rng.integers(-500, 500, size=n)]
    midnight = [dt.datetime.combine(i.date(), dt.time(), dt.UTC) for i in moments]
    tables = {
        "us": pa.table(
            {
                "at": pa.array(moments, pa.timestamp("us", tz="UTC")),
                "v": pa.array([Decimal(u).scaleb(-2) for u in units], pa.decimal128(9, 2)),
            }
        ),
        "s_zone": pa.table(
            {
                "at": pa.array(moments, pa.timestamp("s", tz="Asia/Kolkata")),
                "v": pa.array([Decimal(u * 100).scaleb(-4) for u in units], pa.decimal128(20, 4)),
            }
        ),
        "ns_naive": pa.table(
            {
                "at": pa.array([i.replace(tzinfo=None) for i in moments], pa.timestamp("ns")),
                "v": pa.array([Decimal(u).scaleb(-2) for u in units], pa.decimal256(50, 2)),
            }
        ),
    }
    splits = {}
    for name, data in tables.items():
        folder = tmp_path / name
        folder.mkdir()
        pq.write_table(data, folder / "part-0.parquet", row_group_size=64)
        tbl = cr.open_table(uri(folder))
        perms = (
            cr.PermutationBuilder(tbl)
            .split_hash(["at", "v"], [3, 1], split_names=["train", "val"])
            .persist(uri(tmp_path / f"p-{name}"), progress=False)
        )
        splits[name] = [sorted(perms[i].row_ids().tolist()) for i in range(2)]
        tbl.close()
    assert 0 < len(splits["us"][1]) < n  # both splits hold rows
    assert splits["s_zone"] == splits["us"]
    assert splits["ns_naive"] == splits["us"]

    # dates split as their midnights
    by_day: dict[str, list[list[int]]] = {}
    for name, typ, values in [
        ("date32", pa.date32(), [i.date() for i in moments]),
        ("midnight", pa.timestamp("ms", tz="UTC"), midnight),
    ]:
        folder = tmp_path / name
        folder.mkdir()
        pq.write_table(pa.table({"day": pa.array(values, typ)}), folder / "part-0.parquet")
        tbl = cr.open_table(uri(folder))
        perms = (
            cr.PermutationBuilder(tbl)
            .split_hash(["day"], [1, 1], split_names=["a", "b"])
            .persist(uri(tmp_path / f"p-{name}"), progress=False)
        )
        by_day[name] = [sorted(perms[i].row_ids().tolist()) for i in range(2)]
        tbl.close()
    assert 0 < len(by_day["date32"][0]) < n
    assert by_day["date32"] == by_day["midnight"]
