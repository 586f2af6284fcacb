"""Progress of long calls (permutation builds, rewrites) shown on stderr.

A display is an ``update(phase, done, total, notes=None)`` callback and a
``close()`` that ends it; ``notes`` are figures shown beside the count, such as
the rows a build kept. The time a phase has left is estimated from its pace.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, Protocol


class PhaseCallback(Protocol):
    def __call__(
        self, phase: str, done: int, total: int, notes: dict[str, str] | None = None
    ) -> None: ...


Display = tuple[PhaseCallback, Callable[[], None]]


def tqdm_bars() -> Display | None:
    """tqdm bars counting rows on stderr, one per phase; None when tqdm is not installed."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    bars: dict[str, Any] = {}

    def update(phase: str, done: int, total: int, notes: dict[str, str] | None = None) -> None:
        bar = bars.get(phase)
        if bar is None:
            bar = bars[phase] = tqdm(total=total, desc=phase, unit="rows", unit_scale=True)
        if notes:
            bar.set_postfix(notes, refresh=False)
        bar.update(done - bar.n)

    def close() -> None:
        for bar in bars.values():
            bar.close()

    return update, close


def stderr_lines(prefix: str = "") -> Display:
    """A line ``phase: done/total (pct%)`` on stderr per phase and per tenth of its work.

    The notes follow, then the time left; ``prefix`` comes first (``rank 1 of 4: ``,
    where several processes share stderr). The ``croupier`` command prints the
    same lines when stderr is not a terminal.
    """
    tenths: dict[str, int] = {}
    started: dict[str, float] = {}

    def update(phase: str, done: int, total: int, notes: dict[str, str] | None = None) -> None:
        now = time.monotonic()
        start = started.setdefault(phase, now)
        pct = done * 100 // total if total > 0 else 100
        if pct // 10 > tenths.get(phase, -1):
            tenths[phase] = pct // 10
            extra = "".join(f", {v} {k}" for k, v in (notes or {}).items())
            if 0 < done < total:
                extra += f", {round((now - start) * (total - done) / done)}s left"
            print(f"{prefix}{phase}: {done}/{total} ({pct}%){extra}", file=sys.stderr, flush=True)

    def close() -> None:
        pass

    return update, close
