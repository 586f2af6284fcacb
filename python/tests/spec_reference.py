"""An independent, plain-Python statement of the dealing order and epoch orders of docs/concepts.md.

Used only by the tests, to check what the Go core deals.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Sequence


def steps_per_epoch(m: int, s: int, g: int, drop_last: bool) -> int:
    """``floor(L*S / G)``, plus one partial step when not drop_last."""
    dealt = (m // s) * s
    return dealt // g + (0 if drop_last or dealt % g == 0 else 1)


def rank_batches(
    order: Sequence[int], s: int, g: int, w: int, r: int, drop_last: bool
) -> list[list[int]]:
    """Rank r of w's batch for every step of an epoch dealt from ``order``."""
    m = len(order)
    length = m // s
    streams = [order[i * length : (i + 1) * length] for i in range(s)]
    cycles_per_step = g // s
    owned = range(r * s // w, (r + 1) * s // w)
    batches = []
    for t in range(steps_per_epoch(m, s, g, drop_last)):
        cycles = range(t * cycles_per_step, min((t + 1) * cycles_per_step, length))
        batches.append([streams[i][c] for c in cycles for i in owned])
    return batches


def global_steps(order: Sequence[int], s: int, g: int, drop_last: bool) -> list[set[int]]:
    """The set of row ids of each global step (all ranks together)."""
    return [set(b) for b in rank_batches(order, s, g, 1, 0, drop_last)]


def rank_batches_from(
    order: Sequence[int],
    s: int,
    g: int,
    w: int,
    r: int,
    drop_last: bool,
    *,
    start: int = 0,
    worker: int = 0,
    num_workers: int = 0,
) -> list[tuple[int, list[int]]]:
    """``(step, batch)`` that worker ``worker`` of ``num_workers`` makes from step ``start``.

    Worker k of K makes steps start + k, start + k + K, ... (docs/concepts.md); K = 0
    behaves as one worker.
    """
    batches = rank_batches(order, s, g, w, r, drop_last)
    stride = max(num_workers, 1)
    return [(t, batches[t]) for t in range(start + worker, len(batches), stride)]


def dealt_and_left_out(order: Sequence[int], s: int) -> tuple[list[int], list[int]]:
    """The positions dealt this epoch, and the last ``M - S*L`` that are not (docs/concepts.md)."""
    dealt = (len(order) // s) * s
    return list(order[:dealt]), list(order[dealt:])


# ---------------------------------------------------------------------------
# Epoch orders of a shuffled permutation split (docs/concepts.md, "Epoch orders"), written from the
# specification in the doc comments of the Go package ``permutation``
# (random.go: DeriveKey, SplitMix64, Bijection; epoch.go: ForEpoch), so that the
# tests check the Go core against a second implementation.

MASK64 = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15
CHUNK_IDS = 1 << 16  # row ids per persisted chunk of a permutation


def derive_key(seed: int, purpose: str) -> int:
    """First 8 bytes (little endian) of SHA-256("croupier/v1\\0" + purpose + "\\0" + seed)."""
    message = (
        b"croupier/v1\x00" + purpose.encode() + b"\x00" + (seed & MASK64).to_bytes(8, "little")
    )
    return int.from_bytes(hashlib.sha256(message).digest()[:8], "little")


def mix64(z: int) -> int:
    """SplitMix64's output function on a 64-bit integer."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


class Bijection:
    """Keyed permutation of [0, n): a 4-round balanced Feistel network with cycle walking."""

    def __init__(self, n: int, key: int) -> None:
        self.n = n
        self.key = key
        self.half = 1  # smallest h with 2^(2h) >= n
        while (1 << (2 * self.half)) < n:
            self.half += 1
        self.mask = (1 << self.half) - 1

    def encrypt(self, x: int) -> int:
        """One pass of the Feistel network over 2h bits."""
        left, right = x >> self.half, x & self.mask
        for rnd in range(4):
            f = mix64((self.key + (rnd + 1) * GOLDEN_GAMMA + right) & MASK64) & self.mask
            left, right = right, left ^ f
        return (left << self.half) | right

    def __call__(self, x: int) -> int:
        assert 0 <= x < self.n
        x = self.encrypt(x)
        while x >= self.n:  # cycle walking
            x = self.encrypt(x)
        return x


def epoch_order(
    stored: Sequence[int], shuffled: bool, clump_size: int | None, seed: int, epoch: int
) -> list[int]:
    """The row ids a permutation split deals in ``epoch`` (docs/concepts.md, "Epoch orders").

    ``stored`` is the persisted order (epoch 0). For a shuffled split's later
    epochs: cut the positions into blocks of ``B = floor(CHUNK_IDS / c) * c``
    (``c`` the clump size, 1 if unset; ``B = c`` if ``c > CHUNK_IDS``). Block b of
    the epoch is block ``Bijection(full blocks, key "epoch/<e>/blocks")(b)`` of the
    stored order if b is a full block, else the final partial block itself. Inside
    each block, the clump at position k is clump
    ``Bijection(whole clumps, key "epoch/<e>/block/<b>")(k)`` of that block, and a
    partial clump at the very end stays last.
    """
    if epoch == 0 or not shuffled or not stored:
        return list(stored)
    c = max(clump_size or 1, 1)
    size = max(CHUNK_IDS // c * c, c)
    blocks = [list(stored[i : i + size]) for i in range(0, len(stored), size)]
    full_blocks = len(stored) // size
    pick_block = Bijection(full_blocks, derive_key(seed, f"epoch/{epoch}/blocks"))
    out: list[int] = []
    for b in range(len(blocks)):
        block = blocks[pick_block(b)] if b < full_blocks else blocks[b]
        whole = len(block) // c
        clumps = [block[k * c : (k + 1) * c] for k in range(whole)]
        tail = block[whole * c :]
        pick_clump = Bijection(whole, derive_key(seed, f"epoch/{epoch}/block/{b}"))
        for k in range(whole):
            out.extend(clumps[pick_clump(k)])
        out.extend(tail)
    return out


# ---------------------------------------------------------------------------
# Token-budget steps (docs/concepts.md, "Token-budget steps").


def token_steps(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """The positions of the epoch order each global step holds.

    Greedy in order: a step takes the next positions while their lengths sum to
    at most ``budget``; a row longer than the budget (oversize="truncate") is a
    step of its own; the last step holds what is left.
    """
    steps: list[list[int]] = []
    current: list[int] = []
    tokens = 0
    for p, n in enumerate(lengths):
        if n > budget:
            steps += [current] if current else []
            steps.append([p])
            current, tokens = [], 0
        elif current and tokens + n > budget:
            steps.append(current)
            current, tokens = [p], n
        else:
            current.append(p)
            tokens += n
    return steps + ([current] if current else [])


def token_shares(lengths: Sequence[int], budget: int, w: int) -> list[list[int]]:
    """The indexes into one step's rows (``lengths``, in epoch order) each of ``w`` ranks gets.

    Rows by length descending (each counted at most ``budget``), ties by
    position, each to the rank with the fewest tokens so far, ties to the
    lowest rank; each rank's rows in epoch order.
    """
    loads = [0] * w
    shares: list[list[int]] = [[] for _ in range(w)]
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        r = min(range(w), key=lambda r: (loads[r], r))
        loads[r] += min(lengths[i], budget)
        shares[r].append(i)
    return [sorted(s) for s in shares]


def group_token_deal(groups: Sequence[Sequence[int]], budget: int, w: int) -> list[list[list[int]]]:
    """Each step's groups (indexes into ``groups``, each the lengths of a group's
    rows in epoch order), rank by rank, of a grouped permutation in token-budget
    steps.

    Steps are ``token_steps`` over the groups' summed lengths: whole groups,
    greedy in order, a group longer than the budget (oversize="truncate") a step
    of its own. A step's groups go to the ranks as ``token_shares`` gives rows,
    a group counting its rows' lengths, each at most ``budget``.
    """
    out = []
    for step in token_steps([sum(g) for g in groups], budget):
        tokens = [sum(min(n, budget) for n in groups[i]) for i in step]
        shares = token_shares(tokens, max(tokens), w)
        out.append([[step[i] for i in share] for share in shares])
    return out


# ---------------------------------------------------------------------------
# Mixtures (docs/concepts.md, "Mixtures").


def mixture_u(seed: int, step: int, slot: int) -> float:
    """First 8 bytes (little endian) of SHA-256("croupier/mixture\\0<seed>\\0<t>\\0<j>") / 2**64."""
    message = "\0".join(["croupier/mixture", str(seed), str(step), str(slot)]).encode()
    return int.from_bytes(hashlib.sha256(message).digest()[:8], "little") / 2**64


def mixture_weights(points: Sequence[tuple[int, Sequence[float]]], step: int) -> list[float]:
    """Linear between the schedule's points, the last point's after it."""
    for (ta, wa), (tb, wb) in itertools.pairwise(points):
        if ta <= step < tb:
            return [a + (b - a) * (step - ta) / (tb - ta) for a, b in zip(wa, wb, strict=True)]
    return list(points[-1][1])


def mixture_plan(
    seed: int,
    points: Sequence[tuple[int, Sequence[float]]],
    slots: int,
    steps_per_epoch: Sequence[int],
    policy: str,
    max_steps: int,
) -> list[list[tuple[int, int, int]]]:
    """``(source, epoch, step)`` of every slot of every mixture step of one
    iteration from the start (every source at epoch 0, step 0)."""
    cursors = [[0, 0] for _ in steps_per_epoch]
    out = [False] * len(steps_per_epoch)
    plan: list[list[tuple[int, int, int]]] = []
    for t in range(max_steps):
        taken: list[tuple[int, int, int]] = []
        for j in range(slots):
            u = mixture_u(seed, t, j)
            while True:
                w = [0.0 if o else x for x, o in zip(mixture_weights(points, t), out, strict=True)]
                total = math.fsum(w)  # summed exactly, as the Go core does
                if total <= 0:
                    return plan
                cumulative, i = 0.0, -1
                for k, x in enumerate(w):
                    cumulative += x
                    if x > 0 and cumulative > u * total:
                        i = k
                        break
                epoch, done = cursors[i]
                if done < steps_per_epoch[i]:
                    break
                if policy == "stop":
                    return plan
                if policy == "cycle":
                    cursors[i] = [epoch + 1, 0]
                    break
                out[i] = True
            taken.append((i, cursors[i][0], cursors[i][1]))
            cursors[i][1] += 1
        plan.append(taken)
    return plan
