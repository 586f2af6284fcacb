"""Build a permutation on the processes of a torchrun job: ``python -m croupier.permute``.

``croupier permute``, the Go command, builds a permutation in one process;
this module builds the same permutation, byte for byte, on several::

    torchrun --nproc-per-node 4 -m croupier.permute file:///data/docs file:///perms/run-7 \\
        --filter "score > 0.5" --split-hash doc_id:99,1 --split-names train,val \\
        --shuffle-seed 7

Its flags are ``croupier permute``'s, plus ``--timeout``. Where ``WORLD_SIZE``
is above 1 (torchrun sets it) each process joins the job's process group
(gloo, ``env://``: ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``) and builds its
share with ``PermutationBuilder.persist(group=...)``; without it the one
process builds alone. Every rank prints its own progress on stderr, each line
starting ``rank R of W:``; rank 0 prints the permutation on stdout, as
``croupier permute`` does. A failed build has every rank print the error,
which names the rank that failed, and exit 1; a bad flag exits 2. See
docs/tuning.md, "Building permutations on several processes".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from . import _progress
from .errors import CroupierError, UnavailableError, error_class
from .permutation import PermutationBuilder, Permutations, _build_report, _lost
from .table import open_table

__all__ = ["main"]

PROG = "croupier.permute"


class UsageError(Exception):
    """Flags that do not fit together; the command exits 2."""


def parser() -> argparse.ArgumentParser:
    """The command's flags: ``croupier permute``'s, and ``--timeout``."""
    p = argparse.ArgumentParser(
        prog=f"python -m {PROG}",
        description="Build and persist a permutation, on every process of a torchrun job "
        "(WORLD_SIZE > 1) or in this one.",
    )
    p.add_argument("table_uri", metavar="TABLE_URI")
    p.add_argument("perm_uri", metavar="PERM_URI")
    p.add_argument("--version", type=int, default=0, help="table version to pin (0: the latest)")
    p.add_argument("--filter", help="SQL boolean expression: only rows where it is true")
    p.add_argument(
        "--split-random",
        help="random split: fractions (0.9,0.1 or 90%%,10%%), row counts (9000,1000) or fixed",
    )
    p.add_argument(
        "--split-sequential", help="sequential split in row id order: fractions or row counts"
    )
    p.add_argument(
        "--split-hash", help="split by a hash of column values: col1,col2:w1,w2[:discard]"
    )
    p.add_argument(
        "--split-calculated", help="split by a SQL integer expression giving the split index"
    )
    p.add_argument(
        "--split-fixed",
        type=int,
        help='with --split-random or --split-sequential given as "fixed": splits of N rows',
    )
    p.add_argument("--split-names", help="names of the splits, comma-separated")
    p.add_argument("--seed", type=int, help="seed of a random split")
    p.add_argument("--shuffle-seed", type=int, help="shuffle every split with this seed")
    p.add_argument(
        "--clump",
        help="shuffle clumps of N consecutive rows, or auto: the rows of each page of the "
        "widest column",
    )
    p.add_argument("--window", type=int, help="shuffle within windows of N clumps")
    p.add_argument(
        "--group-by", help="deal rows sharing these columns' values as one group: col1,col2"
    )
    p.add_argument(
        "--lengths",
        help="record each row's length from this column (a list: its length; an integer: "
        "its value), for token-budget steps",
    )
    p.add_argument(
        "--build-memory",
        type=int,
        default=0,
        help="bytes each process's build may hold (0: 1 GiB; at least 256 MiB)",
    )
    p.add_argument("--cache-dir", help="disk cache of a remote table's reads")
    p.add_argument(
        "--timeout",
        type=float,
        help="seconds a rank waits for the others at each exchange before it fails the build "
        "(default: torch's, 30 minutes); more than the slowest rank's lead on the fastest",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help="print the permutation as JSON")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command with ``argv`` (``sys.argv[1:]`` when None); its exit status."""
    try:
        args = parser().parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on a bad flag, 0 on --help
        return exc.code if isinstance(exc.code, int) else 2
    try:
        rank, world = _rank_world()
        calls = builder_calls(args, note=rank == 0)
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        joined = world > 1 and _join(args.timeout)
    except (RuntimeError, ValueError) as exc:  # torch's: a rendezvous timed out, no MASTER_ADDR
        print(f"{PROG}: rank {rank} of {world} could not join the group: {exc}", file=sys.stderr)
        return 1
    try:
        perms = _build(args, calls, rank, world)
    except CroupierError as exc:
        who = f"rank {rank} of {world}: " if world > 1 else ""
        print(f"{PROG}: {who}{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        if joined:
            import torch.distributed as dist

            dist.destroy_process_group()
    with perms:
        if rank == 0:
            print_permutation(perms, args.json)
    return 0


# The builder's method calls a command line makes: (name, args, kwargs).
Calls = list[tuple[str, tuple[Any, ...], dict[str, Any]]]


def builder_calls(args: argparse.Namespace, *, note: bool = True) -> Calls:
    """The PermutationBuilder calls of the flags, as ``croupier permute`` reads
    them; ``note``: say on stderr when split sizes are read as row counts."""
    calls: Calls = []
    if args.filter is not None:
        calls.append(("filter", (args.filter,), {}))
    split = _split_call(args, note)
    if split is not None:
        calls.append(split)
    if args.group_by is not None:
        calls.append(("group_by", (_names(args.group_by),), {}))
    if args.shuffle_seed is not None or args.clump is not None or args.window is not None:
        shuffle = {"clump_size": _clump(args.clump), "window": args.window or None}
        calls.append(("shuffle", (args.shuffle_seed or 0,), shuffle))
    if args.lengths is not None:
        calls.append(("lengths", (args.lengths,), {}))
    return calls


def _split_call(
    args: argparse.Namespace, note: bool
) -> tuple[str, tuple[Any, ...], dict[str, Any]] | None:
    """The ``split_*`` call of the flags; None when no --split-* flag is given."""
    given = {
        f: getattr(args, f.replace("-", "_"))
        for f in ("split-random", "split-sequential", "split-hash", "split-calculated")
    }
    given = {f: v for f, v in given.items() if v is not None}
    if len(given) > 1:
        raise UsageError(" and ".join(f"--{f}" for f in given) + " are exclusive")
    if not given:
        if args.split_names is not None or args.seed is not None or args.split_fixed is not None:
            raise UsageError("--split-names, --seed and --split-fixed need a --split-* flag")
        return None
    ((flag, value),) = given.items()
    names = None if args.split_names is None else _names(args.split_names)
    if flag == "split-calculated":
        return ("split_calculated", (value,), {"split_names": names or []})
    if flag == "split-hash":
        return _hash_call(value, names)
    sizes = _sizes(flag, value, args.split_fixed, note)
    if flag == "split-random":
        return ("split_random", (), {**sizes, "seed": args.seed or 0, "split_names": names})
    return ("split_sequential", (), {**sizes, "split_names": names})


def _hash_call(value: str, names: list[str] | None) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    """The split_hash call of ``--split-hash col1,col2:w1,w2[:discard]``."""
    want = f"--split-hash {value!r}: want col1,col2:w1,w2[:discard]"
    parts = value.split(":")
    if not 2 <= len(parts) <= 3 or not _names(parts[0]):
        raise UsageError(want)
    weights = _ints(parts[1], want)
    discard = _ints(parts[2], want) if len(parts) == 3 else [0]
    if len(discard) != 1:
        raise UsageError(f"--split-hash {value!r}: the discard weight must be one integer")
    kwargs = {"discard_weight": discard[0], "split_names": names}
    return ("split_hash", (_names(parts[0]), weights), kwargs)


def _sizes(flag: str, value: str, fixed: int | None, note: bool) -> dict[str, Any]:
    """The sizes of ``--split-random`` or ``--split-sequential``: fractions when
    any has a fraction or a percent sign, row counts when all are integers
    (said on stderr, since 95,5 may have been meant as percentages), or
    ``fixed``."""
    if value == "fixed":
        if not fixed or fixed <= 0:
            raise UsageError(f"--{flag} fixed needs --split-fixed N")
        return {"fixed": fixed}
    try:
        counts = [int(v) for v in value.split(",")]
    except ValueError:
        pass
    else:
        if note:
            print(
                f"{PROG}: --{flag} {value} is read as row counts: splits of "
                f"{', '.join(map(str, counts))} rows (for fractions of the kept rows write "
                "0.95,0.05 or 95%,5%)",
                file=sys.stderr,
            )
        return {"counts": counts}
    try:
        ratios = [
            float(v.strip()[:-1]) / 100 if v.strip().endswith("%") else float(v)
            for v in value.split(",")
        ]
    except ValueError:
        raise UsageError(
            f"--{flag} {value!r}: want fractions (0.9,0.1 or 90%,10%), "
            'row counts (900,100) or "fixed"'
        ) from None
    return {"ratios": ratios}


def _clump(value: str | None) -> int | str | None:
    """``--clump``: a count of rows, or auto."""
    if value is None or value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise UsageError(f"--clump {value!r}: want a count of rows (0 or more) or auto")
    return n or None


def _names(value: str) -> list[str]:
    """A comma-separated list, without its empty items."""
    return [v.strip() for v in value.split(",") if v.strip()]


def _ints(value: str, want: str) -> list[int]:
    try:
        return [int(v) for v in value.split(",")]
    except ValueError:
        raise UsageError(want) from None


def _rank_world() -> tuple[int, int]:
    """This process's rank and the number of ranks, from torchrun's environment."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        return (int(os.environ["RANK"]) if world > 1 else 0), world
    except (KeyError, ValueError):
        raise UsageError(
            "WORLD_SIZE and RANK, as torchrun sets them, must be integers "
            f"(WORLD_SIZE={os.environ.get('WORLD_SIZE')!r}, RANK={os.environ.get('RANK')!r})"
        ) from None


def _join(timeout: float | None) -> bool:
    """Join the job's process group unless this process already has one;
    whether it joined (and must leave)."""
    import torch.distributed as dist

    if dist.is_initialized():
        return False
    kwargs: dict[str, Any] = {}
    if timeout is not None:
        kwargs["timeout"] = timedelta(seconds=timeout)
    dist.init_process_group("gloo", init_method="env://", **kwargs)
    return True


def _build(args: argparse.Namespace, calls: Calls, rank: int, world: int) -> Permutations:
    """Build the permutation, on every rank of the default group when there
    are several."""
    group: Any = None
    if world > 1:
        import torch.distributed as dist

        group = dist.group.WORLD
    builder = _agree(lambda: _builder(args, calls), args.perm_uri, rank, world, group)
    display = None
    if not args.quiet:
        if world > 1:
            display = _progress.stderr_lines(f"rank {rank} of {world}: ")
        else:
            display = (_progress.tqdm_bars() if sys.stderr.isatty() else None) or (
                _progress.stderr_lines()
            )
    try:
        return builder._persist(
            args.perm_uri,
            _build_report(display[0] if display else None, False),
            build_memory=args.build_memory or None,
            group=group,
        )
    finally:
        if display:
            display[1]()


def _builder(args: argparse.Namespace, calls: Calls) -> PermutationBuilder:
    """The builder of the table and ``calls``."""
    table = open_table(args.table_uri, args.version or None, cache_dir=args.cache_dir)
    builder = PermutationBuilder(table)
    for name, pos, kwargs in calls:
        builder = getattr(builder, name)(*pos, **kwargs)
    return builder


def _agree(
    make: Callable[[], PermutationBuilder], uri: str, rank: int, world: int, group: Any
) -> PermutationBuilder:
    """``make()`` on every rank; once every rank made its builder, this
    rank's. When a rank fails, every rank raises its error's class, naming
    it: no rank is left waiting for one that never starts the build."""
    error: CroupierError | None = None
    try:
        builder = make()
    except CroupierError as exc:
        if group is None:
            raise
        error = exc
    if group is None:
        return builder
    import torch.distributed as dist

    mine = None if error is None else [int(error.code), str(error)]
    every: list[Any] = [None] * world
    try:
        dist.all_gather_object(every, mine, group=group)
    except RuntimeError as exc:
        raise UnavailableError(_lost(uri, rank, world, exc)) from exc
    for r, failed in enumerate(every):
        if failed is not None:
            raise error_class(failed[0])(f"rank {r} of {world} failed: {failed[1]}")
    return builder


def print_permutation(perms: Permutations, as_json: bool) -> None:
    """Print the permutation as ``croupier permute`` does: its provenance and
    split sizes, as text or as one JSON document."""
    m, info = perms._manifest, perms._info
    build = info.get("build") or {}
    out: dict[str, Any] = {
        "id": m["id"],
        "uri": perms.uri,
        "format": m["format"],
        "table_uri": m["table"]["uri"],
        "table_version": m["table"]["version"],
        "spec": m["spec"],
        "splits": m["splits"],
        "rows_scanned": m["rows_scanned"],
        "rows_kept": m["rows_kept"],
        "row_groups": m["row_groups"],
        "row_groups_skipped": m["row_groups_skipped"],
    }
    if build.get("built_at"):
        out["built_at"], out["build_seconds"] = build["built_at"], build.get("build_seconds")
    if as_json:
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return
    spec = json.dumps(m["spec"], separators=(",", ":"), ensure_ascii=False)
    print(f"permutation  {out['id']}\nuri          {out['uri']}")
    print(f"table        {out['table_uri']} version {out['table_version']}")
    print(f"spec         {spec}\nformat       {out['format']}")
    print(f"rows         {out['rows_kept']} kept of {out['rows_scanned']} scanned")
    print(f"row groups   {out['row_groups']}, {out['row_groups_skipped']} skipped by statistics")
    if "built_at" in out:
        print(f"built        {out['built_at']} in {out['build_seconds']:.3f}s")
    print("splits:")
    width = max((len(str(s["num_rows"])) for s in m["splits"]), default=0)
    name_width = max((len(s["name"]) for s in m["splits"]), default=0)
    for s in m["splits"]:
        print(f"  {s['name']:>{name_width}}  {s['num_rows']:>{width}}")


if __name__ == "__main__":
    sys.exit(main())
