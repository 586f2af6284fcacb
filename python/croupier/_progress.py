"""Progress of long calls (permutation builds, rewrites) shown on stderr.

A display is an ``update(phase, done, total)`` callback and a ``close()`` that
ends it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

PhaseCallback = Callable[[str, int, int], None]
Display = tuple[PhaseCallback, Callable[[], None]]


def tqdm_bars() -> Display | None:
    """tqdm bars counting rows on stderr, one per phase; None when tqdm is not installed."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    bars: dict[str, Any] = {}

    def update(phase: str, done: int, total: int) -> None:
        bar = bars.get(phase)
        if bar is None:
            bar = bars[phase] = tqdm(total=total, desc=phase, unit="rows", unit_scale=True)
        bar.update(done - bar.n)

    def close() -> None:
        for bar in bars.values():
            bar.close()

    return update, close


def stderr_lines() -> Display:
    """A line ``phase: done/total (pct%)`` on stderr per phase and per tenth of its work.

    The ``croupier`` command prints the same lines when stderr is not a terminal.
    """
    tenths: dict[str, int] = {}

    def update(phase: str, done: int, total: int) -> None:
        pct = done * 100 // total if total > 0 else 100
        if pct // 10 > tenths.get(phase, -1):
            tenths[phase] = pct // 10
            print(f"{phase}: {done}/{total} ({pct}%)", file=sys.stderr, flush=True)

    def close() -> None:
        pass

    return update, close
