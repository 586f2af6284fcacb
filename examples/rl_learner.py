"""An RL learner reading rollouts from a croupier table, with the data provenance recorded.

    python examples/rl_learner.py --data ./rl-data --steps 12
    python examples/rl_learner.py --data ./rl-online --steps 12 --online

What it does (offline, the default):

1. A generation fleet writes rollouts: one row per message of a rollout
   (RolloutRecord-style: rollout_id, problem_id, sequence_order, role, tokens,
   logprobs, advantage, ...). The first batch creates a croupier table, a later
   one appends to it as a new version, as the fleet would after a policy update.
2. A permutation of the latest version keeps only the rows to train on
   (``include_in_training = TRUE AND role = 'assistant'``), splits them into
   train/val by a hash of ``problem_id`` (all samples of one prompt land on the
   same side, in this version and every later one), groups them by
   ``problem_id`` (GRPO's groups: the samples of one prompt are dealt together,
   in one step and on one rank) and shuffles the groups.
3. The learner streams only ``output_tokens``, ``output_logprobs`` and
   ``advantage``, list columns packed (values + offsets, the ``cu_seqlens`` of a
   varlen model), and takes a few clipped policy-gradient steps on a tiny
   next-token model. A step holds the groups that start in its 16 positions, so
   its size varies.
4. It saves the policy and, next to it, a JSON record of the table version and
   permutation that trained it, the loader's checkpoint, and exactly which
   rollouts each step trained on (``rows_of_step`` and ``Table.take``).

With ``--online`` the fleet keeps generating while the learner trains:
generator processes append a version of rollouts after each "policy update",
and the learner follows the table (``cr.FollowingDataset``): each round deals
the rows of the versions committed since the round before, with a replay
sample of older ones, skipping rows more than 4 versions behind the newest
the generators committed, and each problem's rollouts of a version (a GRPO
group) whole, in token-budget steps of whole groups. Rows not to train on
(prompts, truncated answers) are left out by a filter that reads only its
columns. It saves the policy with the learner's checkpoint and, for every
step, the table versions and the rollouts that trained it (each batch's
``_version`` and ``rollout_id``); and the checkpoint alone (``state.json``),
from which ``croupier deal --checkpoint state.json --steps :`` recomputes, in
one call, every step's rows and the version that added each.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import torch
from torch import nn

import croupier as cr

VOCAB = 256
TRAIN_FILTER = "include_in_training = TRUE AND role = 'assistant'"
COLUMNS = ["output_tokens", "output_logprobs", "advantage"]


# One row per message of a rollout, as a generation fleet writes them.
SCHEMA = pa.schema(
    [
        ("rollout_id", pa.string()),
        ("problem_id", pa.int64()),
        ("sequence_order", pa.int32()),
        ("role", pa.string()),
        ("output_tokens", pa.list_(pa.int32())),
        ("output_logprobs", pa.list_(pa.float32())),
        ("reward", pa.float32()),
        ("advantage", pa.float32()),
        ("include_in_training", pa.bool_()),
        ("policy_version", pa.int32()),
        ("finish_reason", pa.string()),
        ("generator", pa.string()),
    ]
)


def as_uri(path: Path) -> str:
    return "file://" + str(path.resolve())


def rollouts(rng: np.random.Generator, problems: range, samples: int, policy: int) -> pa.Table:
    """``samples`` rollouts of each problem: a user prompt row, then the assistant's answer row."""
    rows: dict[str, list] = {name: [] for name in SCHEMA.names}
    for problem in problems:
        rewards = rng.random(samples).astype(np.float32)
        advantages = rewards - rewards.mean()  # group-relative, as in GRPO
        for k in range(samples):
            rollout_id = f"p{policy}-{problem}-{k}"
            for order, role in enumerate(("user", "assistant")):
                n = int(rng.integers(4, 33))
                finish = "stop" if role == "user" or rng.random() > 0.1 else "length"
                rows["rollout_id"].append(rollout_id)
                rows["problem_id"].append(problem)
                rows["sequence_order"].append(order)
                rows["role"].append(role)
                rows["output_tokens"].append(rng.integers(0, VOCAB, n).tolist())
                # about what an untrained policy over VOCAB tokens gives
                rows["output_logprobs"].append((rng.normal(-np.log(VOCAB), 0.1, n)).tolist())
                rows["reward"].append(float(rewards[k]))
                rows["advantage"].append(float(advantages[k]))
                # truncated answers and prompts are kept for analysis, not trained on
                rows["include_in_training"].append(role == "assistant" and finish == "stop")
                rows["policy_version"].append(policy)
                rows["finish_reason"].append(finish)
                rows["generator"].append(f"sampler-{problem % 3}")
    return pa.table(rows, schema=SCHEMA)


def write_rollouts(uri: str, seed: int) -> cr.Table:
    """Create the table (or open an existing one), append one more batch; return the latest."""
    rng = np.random.default_rng(seed)
    with contextlib.suppress(cr.AlreadyExistsError):  # a rerun keeps the table, adds to it
        cr.create_table(uri, rollouts(rng, range(0, 48), samples=4, policy=0)).close()
    # later problems, and more samples of some earlier ones, from the next policy
    with cr.open_table(uri) as tbl:
        tbl.append(rollouts(rng, range(32, 80), samples=4, policy=tbl.version))
    return cr.open_table(uri)


class TinyPolicy(nn.Module):
    """Next-token logits from the previous token only: an embedding and a linear layer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 32)
        self.head = nn.Linear(32, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens.long()))


def policy_loss(
    model: nn.Module, batch: dict[str, torch.Tensor], clip: float = 0.2
) -> torch.Tensor:
    """PPO-style clipped surrogate over packed sequences.

    ``output_tokens`` holds every sequence of the batch back to back and
    ``output_tokens_offsets`` their boundaries (cu_seqlens). Token i of a
    sequence is scored from token i-1, so the first token of each sequence has
    no prediction and is masked out.
    """
    tokens, offsets = batch["output_tokens"], batch["output_tokens_offsets"]
    lengths = offsets.diff()
    seq = torch.repeat_interleave(torch.arange(len(lengths)), lengths)  # token -> its sequence

    # Pairs (token i, token i + 1) of the packed tokens; only pairs inside one sequence count.
    scored = seq[1:] == seq[:-1]
    if "include_in_training" in batch:
        scored &= batch["include_in_training"][seq[1:]]
    logits = model(tokens[:-1])
    new_logp = torch.log_softmax(logits, -1).gather(1, tokens[1:].long()[:, None])[:, 0]
    old_logp = batch["output_logprobs"][1:]  # the generator's logprob of each scored token
    advantage = batch["advantage"][seq[1:]]  # each token gets its sequence's advantage

    ratio = torch.exp(new_logp - old_logp)
    surrogate = torch.minimum(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage)
    return -(surrogate * scored).sum() / scored.sum().clamp(min=1)


def generate(uri: str, generator: int, versions: int, seed: int) -> None:
    """A generator process: after each policy update, append one version of rollouts."""
    rng = np.random.default_rng([seed, generator])
    with cr.open_table(uri) as tbl:  # appends commit on the latest version, whatever it pins
        for update in range(1, versions + 1):
            first = 1000 * (generator + 1) + 8 * update  # new problems: rollout ids stay unique
            tbl.append(rollouts(rng, range(first, first + 8), samples=4, policy=update))
            time.sleep(0.05)


def online(args: argparse.Namespace) -> None:
    """Train while generator processes append rollouts; record what trained the policy."""
    uri = as_uri(args.data / "rollouts")
    with contextlib.suppress(cr.AlreadyExistsError):
        rng = np.random.default_rng(args.seed)
        cr.create_table(uri, rollouts(rng, range(0, 16), samples=4, policy=0)).close()
    ctx = multiprocessing.get_context("spawn")
    generators = [
        ctx.Process(target=generate, args=(uri, g, args.versions, args.seed)) for g in range(2)
    ]
    for g in generators:
        g.start()

    # GRPO's groups, the rollouts of one problem, are appended together and
    # dealt whole: in one step, on one rank, replayed together. The filter
    # drops prompts and truncated answers without reading them; each step
    # holds whole groups of at most --tokens-per-step answer tokens; no row
    # is more than 4 versions older than the newest the generators committed.
    follow = cr.Follow(rows_per_round=128, group_by="problem_id", replay=0.25,
                       filter=TRAIN_FILTER, lengths="output_tokens",
                       max_versions_behind_newest=4, run="learner",
                       wait_timeout=30.0)  # fmt: skip
    ds = cr.FollowingDataset(
        uri,
        follow,
        tokens_per_step=args.tokens_per_step,
        columns=[*COLUMNS, "rollout_id"],
        shuffle_seed=args.seed,
        list_format="packed",
    )
    model = TinyPolicy()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses: list[float] = []
    trained_on = []
    for batch in ds:
        loss = policy_loss(model, batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        rollout_ids = list(batch["rollout_id"])
        step = {
            "step": ds.steps_consumed - 1,
            "round": ds.last_round["round"] if ds.last_round else None,
            "versions": sorted(set(batch["_version"].tolist())),
            "rollouts": sorted(set(rollout_ids)),
        }
        trained_on.append(step)
        print(
            f"step {step['step']:3d}  round {step['round']}  versions {step['versions']}  "
            f"loss {loss.item():+.4f}"
        )
        if len(losses) == args.steps:
            break
    for g in generators:
        g.join()
    stats = ds.stats()
    print(
        f"{stats.get('rounds', 0)} rounds up to version {stats.get('version')}: "
        f"{stats.get('new_rows', 0)} new rows, {stats.get('replayed_rows', 0)} replayed, "
        f"{stats.get('skipped_rows', 0)} skipped as stale, "
        f"{stats.get('filtered_rows', 0)} left out by the filter"
    )
    rollouts_seen = sorted({r for s in trained_on for r in s["rollouts"]})
    versions_seen = sorted({v for s in trained_on for v in s["versions"]})
    print(
        f"rollouts that trained the checkpoint: {len(rollouts_seen)}, "
        f"from table versions {versions_seen}"
    )
    torch.save(model.state_dict(), args.data / "policy.pt")
    record = {
        "checkpoint": "policy.pt",
        "table_uri": uri,
        "columns": COLUMNS,
        "loader_state": ds.state_dict(),
        "steps": len(losses),
        "losses": losses,
        "trained_on": trained_on,
    }
    (args.data / "policy.json").write_text(json.dumps(record, indent=2) + "\n")
    # The learner's checkpoint alone, as croupier deal reads it: the steps are a
    # function of the committed versions, so it recomputes them from the table.
    (args.data / "state.json").write_text(json.dumps(ds.state_dict()) + "\n")
    print(f"saved {args.data / 'policy.pt'}, policy.json and state.json")
    state = args.data / "state.json"
    print(
        "what trained the checkpoint, every step's rows and the version that added each,"
        f" recomputed from the table in one call: go run ./cmd/croupier deal --checkpoint {state}"
        " --steps : --columns rollout_id"
    )
    ds.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("rl-data"), help="folder for everything")
    parser.add_argument("--steps", type=int, default=12, help="global steps to train")
    parser.add_argument("--global-batch-size", type=int, default=16)
    parser.add_argument("--num-splits", type=int, default=8)
    parser.add_argument(
        "--tokens-per-step", type=int, default=512, help="--online: answer tokens a step holds"
    )
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument(
        "--online", action="store_true", help="train while generators append (follow the table)"
    )
    parser.add_argument("--versions", type=int, default=6, help="versions each generator appends")
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    args.data.mkdir(parents=True, exist_ok=True)
    if args.online:
        online(args)
        return

    # 1. rollouts, as a generation fleet writes them
    tbl = write_rollouts(as_uri(args.data / "rollouts"), args.seed)

    # 2. what to train on: one permutation per table version, built once
    perm_uri = as_uri(args.data / "permutations" / f"v{tbl.version}")
    try:
        perms = cr.open_permutations(perm_uri)
    except cr.NotFoundError:
        perms = (
            cr.PermutationBuilder(tbl)
            .filter(TRAIN_FILTER)
            .split_hash(["problem_id"], [4, 1], split_names=["train", "val"])
            .group_by("problem_id")
            .shuffle(seed=args.seed)
            .persist(perm_uri, progress=False)
        )
    train = perms["train"]
    print(f"table v{tbl.version}: {tbl.num_rows} rows; {perms}")

    # 3. stream only what the loss needs
    ds = cr.StreamingDataset(
        train,
        global_batch_size=args.global_batch_size,
        num_splits=args.num_splits,
        columns=COLUMNS,
        shuffle_seed=args.seed,
        list_format="packed",
    )
    loader = cr.DataLoader(ds)
    model = TinyPolicy()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses: list[float] = []
    trained: list[tuple[int, int]] = []  # (epoch, step) of every step taken
    epoch = 0
    while len(losses) < args.steps:
        ds.set_epoch(epoch)
        for step, batch in enumerate(loader, ds.steps_consumed):
            trained.append((epoch, step))
            loss = policy_loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            print(f"step {len(losses):3d}  epoch {epoch}  loss {loss.item():+.4f}")
            if len(losses) == args.steps:
                break
        else:
            epoch += 1

    # 4. the policy, and which data trained it: the rollouts of every step
    provenance_columns = ["rollout_id", "problem_id", "policy_version"]
    trained_on = []
    for epoch, step in trained:
        rows = tbl.take(ds.rows_of_step(step, epoch), provenance_columns)
        trained_on.append({"epoch": epoch, "step": step, **rows.to_pydict()})
    print(f"rollouts that trained the checkpoint ({len(trained)} steps):")
    for s in trained_on:
        problems = sorted(set(s["problem_id"]))
        n = len(s["rollout_id"])
        print(f"  epoch {s['epoch']} step {s['step']:3d}: {n} rollouts of problems {problems}")
    torch.save(model.state_dict(), args.data / "policy.pt")
    record = {
        "checkpoint": "policy.pt",
        "table_uri": tbl.uri,
        "table_version": tbl.version,
        "permutation_uri": perms.uri,
        "permutation_id": perms.id,
        "split": train.name,
        "filter": TRAIN_FILTER,
        "columns": COLUMNS,
        "provenance": train.provenance,
        "loader_state": loader.state_dict(),
        "steps": len(losses),
        "losses": losses,
        "trained_on": trained_on,
    }
    (args.data / "policy.json").write_text(json.dumps(record, indent=2, default=str) + "\n")
    print(f"saved {args.data / 'policy.pt'} and policy.json")
    ds.close()
    perms.close()
    tbl.close()


if __name__ == "__main__":
    main()
