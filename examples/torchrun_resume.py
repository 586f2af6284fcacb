"""Elastic resume with torchrun: train on 2 processes, resume the same run on 3.

    python examples/torchrun_resume.py [--work ./torchrun-demo]

1. ``torchrun --nproc_per_node=2 examples/train.py`` trains for part of an epoch,
   checkpointing every few global steps;
2. ``torchrun --nproc_per_node=3 examples/train.py --resume`` continues from the
   last checkpoint to the end of the epoch.

Both runs log the sample ids each rank trained on (``ids.jsonl``): together
their steps are exactly the steps of one uninterrupted run, whatever the number
of processes. num_splits (12) is divisible by both world sizes, and the global
batch size (24) by num_splits.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

TRAIN = Path(__file__).resolve().parent / "train.py"


def torchrun(nproc: int, work: Path, *extra: str) -> None:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(TRAIN),
        "--data",
        str(work / "table"),
        "--perm",
        str(work / "permutation"),
        "--global-batch-size",
        "24",
        "--num-splits",
        "12",
        "--checkpoint",
        str(work / "checkpoint.pt"),
        "--log-ids",
        str(work / "ids.jsonl"),
        *extra,
    ]
    print("$ python", " ".join(command[1:]), flush=True)
    subprocess.run(command, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("torchrun-demo"), help="output folder")
    parser.add_argument("--rows", type=int, default=4000, help="rows of the demo table")
    parser.add_argument("--first-steps", type=int, default=10, help="steps of the first run")
    parser.add_argument("--checkpoint-every", type=int, default=4, help="global steps")
    args = parser.parse_args()

    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    (work / "ids.jsonl").unlink(missing_ok=True)
    every = ["--checkpoint-every", str(args.checkpoint_every), "--rows", str(args.rows)]
    torchrun(2, work, "--steps", str(args.first_steps), *every)
    torchrun(3, work, "--resume", *every)  # to the end of the epoch
    print(f"sample ids of every step and rank: {work / 'ids.jsonl'}")


if __name__ == "__main__":
    main()
