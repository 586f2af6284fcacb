"""torch, where it is installed.

croupier's datasets read batches without torch: ``format="numpy"``,
``"arrow"`` and ``"python"`` need only pyarrow and numpy, so a JAX or numpy
program installs ``croupier`` alone. Where torch is installed, the datasets
are torch's ``IterableDataset``s (torch's DataLoader tells an iterable
dataset by its class) and follow torch.distributed's rank and DataLoader
workers; ``format="torch"`` and :class:`croupier.DataLoader` need it, and say
to install the ``croupier[torch]`` extra where it is missing.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

try:
    import torch
    import torch.utils.data
except ModuleNotFoundError as exc:
    if exc.name != "torch":
        raise
    torch = None  # type: ignore[assignment]

__all__ = ["IterableDataset", "rank_world", "require", "worker_info"]


class _Dataset:
    """The base class of croupier's datasets where torch is not installed."""


# The base class of croupier's datasets: torch's IterableDataset where it is.
IterableDataset: type = _Dataset if torch is None else torch.utils.data.IterableDataset


def require(what: str) -> ModuleType:
    """torch, or ModuleNotFoundError saying that ``what`` needs it and how to
    install it."""
    if torch is None:
        raise ModuleNotFoundError(
            f"{what} needs torch, which is not installed: pip install 'croupier[torch]' "
            '(format="numpy", "arrow" and "python" read without it)',
            name="torch",
        )
    return torch


def worker_info() -> Any:
    """torch's ``get_worker_info()``: this DataLoader worker's, None outside one
    (and without torch)."""
    return None if torch is None else torch.utils.data.get_worker_info()


def rank_world() -> tuple[int, int]:
    """(rank, world size) of torch.distributed if initialised, else (0, 1)."""
    if torch is None:
        return 0, 1
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
