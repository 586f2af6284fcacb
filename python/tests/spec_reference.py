"""An independent, plain-Python statement of SPEC §3 (the dealing order).

Used only by the tests, to check what the Go core deals.
"""

from __future__ import annotations

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
