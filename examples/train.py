"""Train a tiny reward model with croupier, on one process or many; checkpoint and resume.

One process:

    python examples/train.py --data ./train-data --steps 40

Several (torchrun sets RANK/WORLD_SIZE; each process deals its share of every step):

    python -m torch.distributed.run --standalone --nproc_per_node=2 examples/train.py \\
        --data ./train-data --checkpoint ./train-data/checkpoint.pt --checkpoint-every 10 --steps 20
    # later, on another number of processes, continue exactly where the checkpoint stopped:
    python -m torch.distributed.run --standalone --nproc_per_node=3 examples/train.py \\
        --data ./train-data --checkpoint ./train-data/checkpoint.pt --resume

--data is a table URI or a folder (a small demo table is written there if it does
not exist); --perm is a permutation URI or folder, built on first use (filter,
train/val split, shuffle). Global step t holds the same samples whatever the
number of processes, so a resumed run at another world size continues the same
sequence of steps.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.distributed as dist
from torch import nn

import croupier as cr

VOCAB = 512
ID_COLUMN = "rollout_id"


def as_uri(location: str) -> str:
    """A URI as is; a local path as a file:// URI."""
    return location if "://" in location else "file://" + str(Path(location).resolve())


def write_demo_table(folder: Path, rows: int, seed: int = 0) -> None:
    """Write ``rows`` RL rollouts as Parquet files, as any data pipeline would."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    per_file = max(rows // 4, 1)
    for f, start in enumerate(range(0, rows, per_file)):
        n = min(per_file, rows - start)
        lengths = rng.integers(4, 65, n)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        tokens = rng.integers(0, VOCAB, int(offsets[-1]), dtype=np.int32)
        # The reward the model learns: the share of "good" tokens (ids below 32).
        good = np.add.reduceat((tokens < 32).astype(np.float32), offsets[:-1])
        ids = np.arange(start, start + n, dtype=np.int64)
        table = pa.table(
            {
                ID_COLUMN: ids,
                "problem_id": ids // 8,
                "output_tokens": pa.ListArray.from_arrays(offsets, tokens),
                "reward": (good / lengths).astype(np.float32),
            }
        )
        pq.write_table(table, folder / f"rollouts-{f:03d}.parquet", row_group_size=256)


def open_or_build_permutations(tbl: cr.Table, uri: str, seed: int) -> cr.Permutations:
    """Open the permutation at ``uri``, building it first if there is none."""
    try:
        return cr.open_permutations(uri)
    except cr.NotFoundError:
        pass
    return (
        cr.PermutationBuilder(tbl)
        .filter("reward > 0")  # prefilter: drop rollouts without any reward
        .split_hash(["problem_id"], [9, 1], split_names=["train", "val"])
        .shuffle(seed=seed)
        .persist(uri, progress=False)
    )


class RewardModel(nn.Module):
    """Mean token embedding -> predicted reward."""

    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(VOCAB, 16, mode="mean")
        self.head = nn.Linear(16, 1)

    def forward(self, tokens: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        # packed token ids + row offsets, as croupier's "packed" list format gives them
        return self.head(self.bag(tokens.long(), offsets[:-1])).squeeze(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="train-data", help="table URI or folder")
    parser.add_argument("--perm", default=None, help="permutation URI or folder (built if missing)")
    parser.add_argument("--rows", type=int, default=4000, help="rows of the demo table")
    parser.add_argument(
        "--steps", type=int, default=None, help="total global steps (default: 1 epoch)"
    )
    parser.add_argument("--global-batch-size", type=int, default=24)
    parser.add_argument("--num-splits", type=int, default=12, help="divisible by every world size")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--workers", type=int, default=0, help="num_workers of cr.DataLoader")
    parser.add_argument("--checkpoint", type=Path, default=None, help="checkpoint file")
    parser.add_argument("--checkpoint-every", type=int, default=0, help="global steps")
    parser.add_argument("--resume", action="store_true", help="continue from --checkpoint, if any")
    parser.add_argument("--log-ids", type=Path, default=None, help="JSONL of the ids of each step")
    args = parser.parse_args()

    # torchrun sets WORLD_SIZE; a plain `python` run is a world of one.
    distributed = "WORLD_SIZE" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world_size = dist.get_world_size() if distributed else 1

    # Rank 0 writes the demo table and builds the permutation; the others wait.
    data_uri = as_uri(args.data)
    folder = Path(data_uri.removeprefix("file://"))
    if rank == 0 and data_uri.startswith("file://") and not folder.exists():
        write_demo_table(folder, args.rows)
    perm_uri = as_uri(args.perm) if args.perm else as_uri(str(folder / "permutation"))
    if rank == 0:
        open_or_build_permutations(cr.open_table(data_uri), perm_uri, args.seed)
    if distributed:
        dist.barrier()
    perms = cr.open_permutations(perm_uri)

    # rank and world_size come from torch.distributed
    ds = cr.StreamingDataset(
        perms["train"],
        global_batch_size=args.global_batch_size,
        num_splits=args.num_splits,
        columns=[ID_COLUMN, "output_tokens", "reward"],
        shuffle_seed=args.seed,
    )
    loader = cr.DataLoader(ds, num_workers=args.workers)

    torch.manual_seed(args.seed)
    net = RewardModel()
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    if args.resume and args.checkpoint and args.checkpoint.exists():
        checkpoint = torch.load(args.checkpoint, weights_only=True)
        net.load_state_dict(checkpoint["model"])
        opt.load_state_dict(checkpoint["optimizer"])
        loader.load_state_dict(checkpoint["data"])  # the same dict for every rank
    # DDP all-reduces the gradients, so every rank takes the same optimizer step.
    model = nn.parallel.DistributedDataParallel(net) if distributed else net

    def save() -> None:
        if rank != 0 or args.checkpoint is None:
            return
        tmp = args.checkpoint.with_suffix(".tmp")
        state = {"model": net.state_dict(), "optimizer": opt.state_dict()}
        torch.save({**state, "data": loader.state_dict()}, tmp)
        tmp.replace(args.checkpoint)  # never a half-written checkpoint

    log = open(args.log_ids, "a") if args.log_ids else None  # noqa: SIM115
    steps_per_epoch = ds.steps_per_epoch
    total = args.steps if args.steps is not None else steps_per_epoch
    global_step = ds.epoch * steps_per_epoch + ds.steps_consumed
    if rank == 0:
        print(
            f"world size {world_size}: {len(perms['train'])} training rows, "
            f"{steps_per_epoch} steps per epoch, starting at step {global_step} of {total}",
            flush=True,
        )
    loss = None
    for epoch in itertools.count(ds.epoch):
        if global_step >= total:
            break
        ds.set_epoch(epoch)  # keeps a resumed position inside this epoch
        for batch in loader:
            prediction = model(batch["output_tokens"], batch["output_tokens_offsets"])
            loss = nn.functional.mse_loss(prediction, batch["reward"])
            opt.zero_grad()
            loss.backward()
            opt.step()
            if log is not None:  # which samples this rank trained on, at which step
                record = {
                    "epoch": epoch,
                    "step": global_step % steps_per_epoch,
                    "global_step": global_step,
                    "rank": rank,
                    "world_size": world_size,
                    "ids": batch[ID_COLUMN].tolist(),
                }
                log.write(json.dumps(record) + "\n")
                log.flush()
            global_step += 1
            if args.checkpoint_every and global_step % args.checkpoint_every == 0:
                save()
            if global_step >= total:
                break
        if rank == 0 and loss is not None:
            print(f"epoch {epoch}: step {global_step}, loss {loss.item():.5f}", flush=True)
    save()
    if log is not None:
        log.close()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
