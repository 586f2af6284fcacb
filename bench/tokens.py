"""Token-budget steps against sample-count steps on the same rows.

A table of RL rollouts whose token lists have long-tailed lengths (log-normal,
``--median`` tokens, clipped to [4, ``--tokens-per-step``]), with an aligned
``logprobs`` list and a ``reward``, is permuted once with its lengths recorded.
It is then read, in the same shuffled order, as:

- sample-count steps of G rows, G chosen so that a step holds
  ``--tokens-per-step`` tokens on average, lists padded to each step's
  longest row (``list_format="padded"``), as a trainer without packing feeds
  them;
- token-budget steps of ``--tokens-per-step`` tokens, packed
  (``packing="packed"``: one flat sequence and ``cu_seqlens``);
- the same token-budget steps, padded (``packing="padded"``).

Figures: the tokens of each global step but the epoch's last (mean, coefficient
of variation, min, max, and max ÷ min), the
share of padding in what reaches the model (padded cells ÷ all cells), the
token loads of ``--world-size`` ranks in each step (the most loaded ÷ the
least, the mean over steps), and the read rate in tokens per second. ``bench/run.py`` runs
this as its ``tokens`` part.

``--part mixture`` (``bench/run.py``'s ``mixture`` part) reads the same rows in
packed token-budget steps two ways, in turn ``--repeats`` times, each read in a
fresh process: one source (the permutation of every row), and a
:class:`croupier.Mixture` of three sources (the three thirds of the rows by
id, each a table of its own, weighted by their rows,
``on_exhausted="renormalize"`` so that it deals every row once). Figures: rows
and tokens per second over one epoch and the CPU time it took (the best of the
repeats), the peak resident memory of the process (``VmHWM``) and how much of
it came after the datasets were made, and the mixture's figures as ratios of
the single source's.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import results
from measure import peak_rss, tree_rss

BENCH = Path(__file__).resolve().parent


def write_rollouts(folder: Path, args: argparse.Namespace) -> np.ndarray:
    """Write the table; returns each row's length, by row id."""
    rng = np.random.default_rng(7)
    lengths = np.exp(rng.normal(np.log(args.median), 1.0, args.rows))
    lengths = np.clip(lengths, 4, args.tokens_per_step).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = rng.integers(0, 50_000, int(lengths.sum()), dtype=np.int32)
    tokens = pa.ListArray.from_arrays(offsets, values)
    logprobs = pa.ListArray.from_arrays(offsets, (-values / 50_000).astype(np.float32))
    folder.mkdir(parents=True)
    pq.write_table(
        pa.table(
            {
                "id": np.arange(args.rows, dtype=np.int64),
                "tokens": tokens,
                "logprobs": logprobs,
                "reward": rng.random(args.rows, dtype=np.float32),
            }
        ),
        folder / "part-00000.parquet",
        row_group_size=4096,
        write_page_index=True,
    )
    return lengths


def measure(ds: Any, lengths: np.ndarray, padded: str | None) -> dict[str, float]:
    """Read one epoch of ``ds``; the tokens of each step, padding and rate.

    ``padded`` names the list column padded to each step's longest row, or
    None when the step arrives packed.
    """
    per_step, cells = [], 0
    start = time.perf_counter()
    for batch in ds:
        ids = batch["id"].numpy()
        per_step.append(int(lengths[ids].sum()))
        cells += batch[padded].numel() if padded else int(lengths[ids].sum())
    seconds = time.perf_counter() - start
    steps = np.array(per_step)
    full = steps[:-1]  # the epoch's last token-budget step holds the rows left
    return {
        "steps": len(steps),
        "mean": float(full.mean()),
        "cv": float(full.std() / full.mean()),
        "min": int(full.min()),
        "max": int(full.max()),
        "waste": 1 - steps.sum() / cells,
        "tokens_per_s": steps.sum() / seconds,
    }


def rank_imbalance(make: Any, world: int, lengths: np.ndarray, steps: int) -> float:
    """The mean over the first ``steps`` steps of the most loaded rank's tokens ÷ the
    least loaded's, with ``world`` ranks (``make(rank)`` makes rank r's dataset)."""
    loads = np.zeros((steps, world))
    for r in range(world):
        for t, batch in zip(range(steps), make(r), strict=False):
            loads[t, r] = lengths[batch["id"].numpy()].sum()
    return float((loads.max(axis=1) / np.maximum(loads.min(axis=1), 1)).mean())


# How the mixture part keeps the best of its repeats: the least CPU time, the
# most of every other figure.
BEST = {"cpu_s": min}


def cpu_seconds() -> float:
    """CPU time of this process so far, every thread's (Go's included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def read_mixture(perms: list[str], budget: int) -> dict[str, float]:
    """In a fresh process: one epoch of packed token-budget steps of the
    permutations ``perms``, a Mixture of them if there are several; the rows and
    tokens read, their rates, and the process's resident memory."""
    import croupier as cr

    permutations = [cr.open_permutations(uri)["all"] for uri in perms]
    sources = [
        cr.StreamingDataset(
            perm,
            tokens_per_step=budget,
            packing="packed",
            pack_columns=["tokens", "logprobs"],
            columns=["id", "tokens", "logprobs", "reward"],
        )
        for perm in permutations
    ]
    weights = [len(perm) for perm in permutations]
    steps: Any = sources[0]
    if len(sources) > 1:
        mix = cr.Mixture(
            list(zip(sources, weights, strict=True)), seed=1, on_exhausted="renormalize"
        )
        steps = (batch for [(_, batch)] in mix)
    rss = tree_rss(os.getpid())
    rows = tokens = 0
    start, cpu = time.perf_counter(), cpu_seconds()
    for batch in steps:
        rows += len(batch["id"])
        tokens += int(batch["cu_seqlens"][-1])
    seconds = time.perf_counter() - start
    return {
        "cpu_s": cpu_seconds() - cpu,
        "rows": rows,
        "tokens": tokens,
        "rows_per_s": rows / seconds,
        "tokens_per_s": tokens / seconds,
        "peak_rss": peak_rss(),
        "over_start": peak_rss() - rss,
    }


def mixture_part(args: argparse.Namespace) -> list[str]:
    """The "Mixtures" section: one source against a mixture of three, same rows."""
    import croupier as cr

    budget = args.tokens_per_step
    with tempfile.TemporaryDirectory() as tmp:
        lengths = write_rollouts(Path(tmp) / "rollouts", args)
        # The mixture's sources: the three thirds of the rows by id, each a
        # table of its own, as the sources of a mixture are.
        whole = pq.read_table(Path(tmp) / "rollouts")
        third = -(-args.rows // 3)
        tables = {"single": ["rollouts"], "mixture": [f"third-{k}" for k in range(3)]}
        for k, name in enumerate(tables["mixture"]):
            (Path(tmp) / name).mkdir()
            pq.write_table(
                whole.slice(k * third, third),
                Path(tmp) / name / "part-00000.parquet",
                row_group_size=4096,
                write_page_index=True,
            )
        uris: dict[str, list[str]] = {}
        for way, names in tables.items():
            uris[way] = []
            for k, name in enumerate(names):
                uris[way].append("file://" + str(Path(tmp) / f"{name}-permutation"))
                (
                    cr.PermutationBuilder(cr.open_table("file://" + str(Path(tmp) / name)))
                    .lengths("tokens")
                    .shuffle(seed=k)
                    .persist(uris[way][-1])
                )
        # The two ways take turns, so that a change in the machine's load
        # weighs on both; each figure is the best of the repeats, the one other
        # processes disturbed least (the most memory).
        spawn = multiprocessing.get_context("spawn")
        reps: dict[str, list[dict[str, float]]] = {way: [] for way in tables}
        for _ in range(args.repeats):
            for name in tables:
                with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
                    reps[name].append(pool.submit(read_mixture, uris[name], budget).result())
    runs = {
        name: {key: float(BEST.get(key, max)(r[key] for r in rs)) for key in rs[0]}
        for name, rs in reps.items()
    }
    single, mixed = runs["single"], runs["mixture"]
    assert single["rows"] == mixed["rows"] == args.rows, (single["rows"], mixed["rows"])
    mib = 2**20
    lines = [
        f"{args.rows:,} rows of `bench/tokens.py`'s table (mean {lengths.mean():.0f} tokens),"
        f" read once in packed token-budget steps of {budget:,} tokens (`tokens` and `logprobs`"
        " packed, `id` and `reward`), local files, two ways, in turn"
        f" {args.repeats} times, each read in a fresh process (figures: the best of the"
        " repeats, the most memory):"
        " one source"
        " (a shuffled permutation of every row), and a `cr.Mixture` of three (the three"
        " thirds of the rows by id, each written as a table of its own with the same row"
        " groups of 4,096 rows, shuffled; weights their rows,"
        ' `on_exhausted="renormalize"`, so that it deals every row once). Peak RSS is the'
        ' process\'s (VmHWM, torch and croupier loaded); "after start" is what it grew by'
        " once the datasets were made.",
        "",
        "| read | rows/s | Mtokens/s | CPU s | peak RSS (MiB) | after start (MiB) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, r in (("one source", single), ("mixture of 3 sources", mixed)):
        lines.append(
            f"| {name} | {r['rows_per_s']:,.0f} | {r['tokens_per_s'] / 1e6:.2f} |"
            f" {r['cpu_s']:.2f} |"
            f" {r['peak_rss'] / mib:,.0f} | {r['over_start'] / mib:,.0f} |"
        )
    lines += [
        "",
        f"Mixture ÷ one source: rows/s {mixed['rows_per_s'] / single['rows_per_s']:.2f},"
        f" tokens/s {mixed['tokens_per_s'] / single['tokens_per_s']:.2f} (goal ≥ 0.9);"
        f" CPU time {mixed['cpu_s'] / single['cpu_s']:.2f}. CPU s is the process's CPU"
        " time (every thread's) over the read, less sensitive than the rates to other"
        " processes on the machine.",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--median", type=int, default=300, help="median tokens of a row")
    ap.add_argument("--tokens-per-step", type=int, default=16_384)
    ap.add_argument("--world-size", type=int, default=8)
    ap.add_argument("--imbalance-steps", type=int, default=40)
    ap.add_argument("--out", type=Path, default=BENCH / "RESULTS.md")
    ap.add_argument("--command", default="python bench/tokens.py")
    ap.add_argument("--part", choices=("tokens", "mixture"), default="tokens")
    ap.add_argument("--repeats", type=int, default=3, help="reads of each way (mixture part)")
    args = ap.parse_args(argv)

    import croupier as cr

    load = os.getloadavg()[0]
    if args.part == "mixture":
        body = mixture_part(args)
        lines = [
            f"Generated by `{args.command}` (`bench/tokens.py`, its mixture part), run on"
            f" {results.machine((load, os.getloadavg()[0]))}",
            f"Versions: {results.versions([])}.",
            "",
            *body,
        ]
        print("\n".join(lines))
        results.update_section(args.out, "Mixtures", lines)
        print(f"wrote the Mixtures section of {args.out}")
        return 0
    budget = args.tokens_per_step
    with tempfile.TemporaryDirectory() as tmp:
        lengths = write_rollouts(Path(tmp) / "rollouts", args)
        tbl = cr.open_table("file://" + str(Path(tmp) / "rollouts"))
        perm = (
            cr.PermutationBuilder(tbl)
            .lengths("tokens")
            .shuffle(seed=1)
            .persist("file://" + str(Path(tmp) / "perm"))
        )["all"]
        # G: the budget's tokens on average, a multiple of the world size.
        w = args.world_size
        g = max(round(budget / lengths.mean() / w), 1) * w
        cols = ["id", "tokens", "logprobs", "reward"]
        pack = {"pack_columns": ["tokens", "logprobs"], "columns": cols}

        def samples(**kw: Any) -> Any:
            return cr.StreamingDataset(perm, global_batch_size=g, columns=cols, **kw)

        def tokens(**kw: Any) -> Any:
            return cr.StreamingDataset(perm, tokens_per_step=budget, **pack, **kw)

        runs = {
            f"sample-count steps, G={g}, padded": measure(
                samples(list_format="padded"), lengths, "tokens"
            ),
            f"token-budget steps, T={budget}, packed": measure(
                tokens(packing="packed"), lengths, None
            ),
            f"token-budget steps, T={budget}, padded": measure(
                tokens(packing="padded"), lengths, "tokens"
            ),
        }
        n = args.imbalance_steps
        imbalance = {
            "sample-count": rank_imbalance(lambda r: samples(rank=r, world_size=w), w, lengths, n),
            "token-budget": rank_imbalance(
                lambda r: tokens(rank=r, world_size=w, packing="packed"), w, lengths, n
            ),
        }
    lines = [
        f"Generated by `{args.command}` (`bench/tokens.py`), run on"
        f" {results.machine((load, os.getloadavg()[0]))}",
        f"Versions: {results.versions([])}.",
        "",
        f"{args.rows:,} rows of log-normal token lengths (median {args.median}, clipped to"
        f" [4, {budget:,}], mean {lengths.mean():.0f}), with aligned `tokens` (int32) and"
        " `logprobs` (float32) lists, one shuffled permutation with lengths, one epoch each,"
        f" local files. G = {g} rows holds about {budget:,} tokens. Tokens per step leave out"
        " the epoch's last step, which holds the rows left; the padding share is of the"
        " `tokens` cells reaching the model.",
        "",
        "| steps | steps/epoch | tokens/step mean | CV | min | max | max ÷ min |"
        " padding share | Mtokens/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in runs.items():
        lines.append(
            f"| {name} | {r['steps']} | {r['mean']:,.0f} | {r['cv']:.2f} | {r['min']:,} |"
            f" {r['max']:,} |"
            f" {r['max'] / max(r['min'], 1):.2f} | {r['waste']:.1%} |"
            f" {r['tokens_per_s'] / 1e6:.2f} |"
        )
    lines += [
        "",
        f"Ranks: with {w} ranks, the most loaded rank's tokens ÷ the least loaded's in a"
        f" step, mean over the first {n} steps: sample-count steps"
        f" {imbalance['sample-count']:.2f}, token-budget steps"
        f" {imbalance['token-budget']:.2f} (tokens divided longest first).",
    ]
    print("\n".join(lines))
    results.update_section(args.out, "Token-budget steps", lines)
    print(f"wrote the Token-budget steps section of {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
