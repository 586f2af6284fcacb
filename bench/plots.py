"""PNG plots of the benchmark results (matplotlib, installed by ``make bench``).

Importing this module raises ImportError when matplotlib is missing; the
callers then skip the plots and say so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt


def _color(kind: str) -> str:
    return {"croupier": "tab:blue", "pyarrow": "tab:gray"}.get(kind, "tab:orange")


def _save(fig: Any, title: str, path: Path) -> Path:
    """Title ``fig``, write it to ``path`` as PNG and close it."""
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def loader(results: list[dict[str, Any]], folder: Path) -> list[Path]:
    """Throughput against the baseline, and throughput against order randomness."""
    folder.mkdir(parents=True, exist_ok=True)
    measured = [r for r in results if "note" not in r and r.get("samples")]
    names = list(dict.fromkeys(r["workload"] for r in measured))
    if not names:
        return []
    base = {
        w: next(
            (r["samples_per_s"] for r in measured if r["workload"] == w and r["kind"] == "pyarrow"),
            None,
        )
        for w in names
    }

    rows = max(sum(r["workload"] == w for r in measured) for w in names)
    fig, axes = plt.subplots(
        1, len(names), figsize=(6.5 * len(names), 0.35 * rows + 1.8), squeeze=False
    )
    for ax, w in zip(axes[0], names, strict=True):
        rs = [r for r in measured if r["workload"] == w]
        value = [r["samples_per_s"] / base[w] if base[w] else r["samples_per_s"] for r in rs]
        ax.barh(range(len(rs)), value, color=[_color(r["kind"]) for r in rs])
        ax.set_yticks(range(len(rs)), [f"{r['label']}, {r['order']}" for r in rs], fontsize=7)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.axvline(1, color="black", linewidth=0.8)
        ax.set_xlabel("samples/s ÷ pyarrow sequential" if base[w] else "samples/s")
        ax.set_title(w)
    speed = _save(fig, "Loader throughput (higher is faster)", folder / "loader_throughput.png")

    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 4.5), squeeze=False)
    for ax, w in zip(axes[0], names, strict=True):
        for r in (r for r in measured if r["workload"] == w):
            y = r["samples_per_s"] / base[w] if base[w] else r["samples_per_s"]
            ax.scatter(r["row_groups_per_batch"], y, color=_color(r["kind"]), s=18)
            ax.annotate(
                r["short"],
                (r["row_groups_per_batch"], y),
                fontsize=6,
                xytext=(3, 2),
                textcoords="offset points",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("distinct row groups per batch (more: better mixed)")
        ax.set_ylabel("samples/s ÷ pyarrow sequential" if base[w] else "samples/s")
        ax.set_title(w)
    quality = _save(fig, "Speed against mixing", folder / "loader_mixing.png")
    return [speed, quality]


def objstore(report: dict[str, Any], folder: Path) -> list[Path]:
    """Throughput and latency percentiles against concurrency, per store and range size."""
    folder.mkdir(parents=True, exist_ok=True)
    cells = report["cells"]
    stores = list(dict.fromkeys(c["store"] for c in cells))
    ranges = sorted({c["range_bytes"] for c in cells})
    if not cells:
        return []

    fig, axes = plt.subplots(2, len(ranges), figsize=(4.8 * len(ranges), 7.5), squeeze=False)
    for i, rb in enumerate(ranges):
        for s in stores:
            cs = sorted(
                (c for c in cells if c["store"] == s and c["range_bytes"] == rb),
                key=lambda c: c["concurrency"],
            )
            x = [c["concurrency"] for c in cs]
            axes[0][i].plot(x, [c["mb_per_s"] for c in cs], marker="o", label=s)
            line = axes[1][i].plot(x, [c["p50_ms"] for c in cs], marker="o", label=f"{s} p50")
            axes[1][i].plot(
                x,
                [c["p99_ms"] for c in cs],
                marker="x",
                linestyle="--",
                color=line[0].get_color(),
                label=f"{s} p99",
            )
        size = f"{rb // 2**20} MiB" if rb >= 2**20 else f"{rb // 2**10} KiB"
        concs = sorted({c["concurrency"] for c in cells})
        for ax in axes[:, i]:
            ax.set_xscale("log", base=2)
            ax.set_xticks(concs, [str(c) for c in concs])
            ax.set_yscale("log")
            ax.set_xlabel("concurrent reads")
        axes[0][i].set_title(f"{size} ranges")
        axes[0][i].set_ylabel("MB/s")
        axes[1][i].set_ylabel("latency (ms), p50 solid, p99 dashed")
    axes[0][0].legend(fontsize=7)
    path = _save(
        fig, "GET throughput and latency through croupier's store layer", folder / "objstore.png"
    )
    return [path]
