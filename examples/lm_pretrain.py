"""LM pre-training on a mixture of two tables, in token-budget steps; resumed on more processes.

    python examples/lm_pretrain.py --work ./lm-demo

What it does:

1. Writes two croupier tables of pretokenized documents, ``web`` and ``code``
   (``id`` and a ``tokens`` list of varied length), and a shuffled
   permutation of each with its rows' lengths recorded.
2. ``torchrun --nproc_per_node=2`` trains a tiny causal transformer on a
   :class:`croupier.Mixture` of the two: each global step draws its source
   (90 % web, 10 % code until ``--mix-start``, moving linearly to 50/50 by
   ``--mix-end``) and holds about ``--tokens-per-step`` tokens of that source,
   shared among the ranks by tokens. A rank's share arrives packed: one flat
   ``tokens`` sequence with ``cu_seqlens`` (where each document starts) and
   ``position_ids``; attention stays inside each document and the loss is the
   next-token loss within each, summed over every rank's tokens. It stops at
   ``--first-steps``, checkpointing the model, the optimizer and the mixture
   every ``--checkpoint-every`` steps and at the end.
3. ``torchrun --nproc_per_node=3`` resumes from the checkpoint and trains to
   ``--steps``. A global step holds the same documents of the same source
   whatever the number of processes, so together the two runs train on
   exactly the steps of one uninterrupted run (``steps.jsonl`` logs the source
   and document ids of every step and rank).

A Mixture is iterated directly here; ``croupier.DataLoader(mix,
num_workers=K, in_process=False)`` deals the same steps from K worker
processes.

Under torchrun (``WORLD_SIZE`` set) the script is the trainer;
``--work`` must then hold the tables the plain run writes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch
import torch.distributed as dist
from torch import nn

import croupier as cr

VOCAB = 256
SOURCES = ("web", "code")
STRIDES = (1, 7)  # of the token sequences of each table
WEIGHTS = ((0.9, 0.1), (0.5, 0.5))  # before --mix-start, from --mix-end on
SEED = 1234


def write_tables(work: Path, rows: int, max_tokens: int) -> None:
    """Two tables of documents of 8 to ``max_tokens`` tokens, and a shuffled
    permutation of each with the lengths of its rows."""
    rng = np.random.default_rng(SEED)
    for s, name in enumerate(SOURCES):
        n = rows if s == 0 else rows // 2
        lengths = rng.integers(8, max_tokens + 1, n)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        # Token k of a document is start + stride * k (mod VOCAB), a stride of
        # its own for each table: a sequence the model can learn to continue.
        starts = np.repeat(rng.integers(0, VOCAB, n), lengths)
        k = np.arange(int(lengths.sum())) - np.repeat(offsets[:-1], lengths)
        values = ((starts + STRIDES[s] * k) % VOCAB).astype(np.int32)
        documents = pa.table(
            {
                "id": np.arange(n, dtype=np.int64) + 1_000_000 * s,  # the source in the id
                "tokens": pa.ListArray.from_arrays(offsets, values),
            }
        )
        table = cr.create_table(f"file://{work / name}", documents)
        (
            cr.PermutationBuilder(table)
            .lengths("tokens")
            .shuffle(seed=SEED + s)
            .persist(f"file://{work / name}-permutation")
        )


def mixture(work: Path, args: argparse.Namespace, **dealing: Any) -> cr.Mixture:
    """The mixture of the two tables' token-budget steps; ``dealing`` may name
    ``rank`` and ``world_size`` (by default torch.distributed's)."""
    sources = [
        cr.StreamingDataset(
            cr.open_permutations(f"file://{work / name}-permutation")["all"],
            tokens_per_step=args.tokens_per_step,
            packing="packed",
            pack_columns=["tokens"],
            columns=["id", "tokens"],
            shuffle_seed=SEED,
            **dealing,
        )
        for name in SOURCES
    ]
    return cr.Mixture(
        list(zip(sources, WEIGHTS[0], strict=True)),
        seed=SEED,
        schedule=[(args.mix_start, WEIGHTS[0]), (args.mix_end, WEIGHTS[1])],
        on_exhausted="cycle",  # a source whose epoch ends starts its next one
    )


class TinyLM(nn.Module):
    """A two-layer causal transformer over a packed sequence of documents."""

    def __init__(self, max_len: int, dim: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.position = nn.Embedding(max_len, dim)
        layer = nn.TransformerEncoderLayer(dim, 2, 2 * dim, dropout=0.0, batch_first=True)
        self.blocks = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(dim, VOCAB)

    def forward(
        self, tokens: torch.Tensor, position_ids: torch.Tensor, cu_seqlens: torch.Tensor
    ) -> torch.Tensor:
        """Next-token logits of each position, attending only to earlier
        positions of its own document (``cu_seqlens`` bounds the documents)."""
        n = tokens.numel()
        where = torch.arange(n)
        document = torch.searchsorted(cu_seqlens[1:].long(), where, right=True)
        allowed = (document[:, None] == document[None, :]) & (where[None, :] <= where[:, None])
        x = self.embed(tokens.long()) + self.position(position_ids)
        return self.head(self.blocks(x[None], mask=~allowed)[0])


def train_step(
    model: TinyLM, opt: torch.optim.Optimizer, batch: dict[str, torch.Tensor], distributed: bool
) -> float:
    """One optimizer step on every rank's share of a global step: the mean
    next-token loss over all the ranks' tokens (a rank's share may be empty)."""
    tokens, positions = batch["tokens"], batch["position_ids"]
    opt.zero_grad()
    # A target is the next token of the same document: its position is not 0.
    targets = positions[1:] != 0
    loss = torch.zeros(())
    if targets.any():
        logits = model(tokens, positions, batch["cu_seqlens"])[:-1][targets]
        loss = nn.functional.cross_entropy(logits, tokens[1:][targets].long(), reduction="sum")
        loss.backward()
    params = list(model.parameters())
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads] + [torch.stack([loss.detach(), targets.sum()])])
    if distributed:
        dist.all_reduce(flat)  # sums of the ranks' gradients, losses and targets
    count = max(float(flat[-1]), 1.0)
    for p, g in zip(params, torch.split(flat[:-2], [p.numel() for p in params]), strict=True):
        p.grad = g.view_as(p) / count
    opt.step()
    return float(flat[-2]) / count


def train(args: argparse.Namespace) -> None:
    """The trainer of one process: torchrun's, or a world of one."""
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world_size = dist.get_world_size() if distributed else 1
    work = args.work.resolve()
    checkpoint = work / "checkpoint.pt"

    mix = mixture(work, args)  # rank and world_size from torch.distributed
    torch.manual_seed(SEED)  # the same initial model on every rank
    model = TinyLM(args.max_tokens)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    if args.resume:
        state = torch.load(checkpoint, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        mix.load_state_dict(state["data"])  # written at another world size

    def save() -> None:
        if rank == 0:
            state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
            tmp = checkpoint.with_suffix(".tmp")
            torch.save({**state, "data": mix.state_dict()}, tmp)
            tmp.replace(checkpoint)  # never a half-written checkpoint

    stop = args.steps if args.resume else args.first_steps
    step = mix.steps_consumed
    if rank == 0:
        print(f"world size {world_size}: steps {step} to {stop}", flush=True)
    with open(work / "steps.jsonl", "a") as log:
        for [(source, batch)] in itertools.islice(mix, max(stop - step, 0)):  # one slot a step
            loss = train_step(model, opt, batch, distributed)
            record = {"step": step, "rank": rank, "world_size": world_size, "source": source}
            log.write(json.dumps({**record, "ids": batch["id"].tolist()}) + "\n")
            log.flush()
            step += 1
            if rank == 0 and step % 10 == 0:
                print(f"step {step}: {SOURCES[source]}, loss {loss:.3f}", flush=True)
            if step % args.checkpoint_every == 0:
                save()
    save()
    if distributed:
        dist.destroy_process_group()


def torchrun(nproc: int, args: argparse.Namespace, *extra: str) -> None:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        __file__,
        *sys.argv[1:],
        *extra,
    ]
    print("$ python", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("lm-demo"), help="output folder")
    parser.add_argument("--rows", type=int, default=4000, help="documents of the web table")
    parser.add_argument("--max-tokens", type=int, default=192, help="tokens of the longest")
    parser.add_argument("--tokens-per-step", type=int, default=1024)
    parser.add_argument("--mix-start", type=int, default=20, help="step the 90/10 mix ends")
    parser.add_argument("--mix-end", type=int, default=40, help="step the 50/50 mix starts")
    parser.add_argument("--first-steps", type=int, default=30, help="steps of the first run")
    parser.add_argument("--steps", type=int, default=60, help="steps of both runs")
    parser.add_argument("--checkpoint-every", type=int, default=10, help="global steps")
    parser.add_argument("--resume", action="store_true", help="continue from the checkpoint")
    args = parser.parse_args()

    if "WORLD_SIZE" in os.environ:
        train(args)
        return
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "web").exists():
        write_tables(work, args.rows, args.max_tokens)
    (work / "steps.jsonl").unlink(missing_ok=True)
    torchrun(2, args)
    torchrun(3, args, "--resume")
    print(f"source and document ids of every step and rank: {work / 'steps.jsonl'}")


if __name__ == "__main__":
    main()
