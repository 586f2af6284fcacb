"""croupier: deterministic, resumable training data for PyTorch, read by a Go core.

A croupier shuffles the deck once and deals the same cards to however many
players sit down. This package does that for training data: it pins a version of
a Parquet table, deals every epoch in an order fixed by the data and a few numbers
(not by the number of ranks or DataLoader workers), and checkpoints the position
in a small dict that resumes at any world size. All reading and decoding happens
in Go threads, so ``num_workers=0`` is the fast path and the GIL is not in the way.

>>> import croupier as cr
>>> tbl = cr.open_table("file:///data/rollouts")                     # doctest: +SKIP
>>> ds = cr.StreamingDataset(tbl, global_batch_size=64, num_splits=16)  # doctest: +SKIP
>>> for batch in cr.DataLoader(ds): ...                               # doctest: +SKIP

Only ``DataLoader`` and ``format="torch"`` (the datasets' default) need torch,
the ``croupier[torch]`` extra; the rest, batches in ``format="numpy"``,
``"arrow"`` or ``"python"`` included, needs only pyarrow and numpy. Where it
is installed, torch is imported on first use of a dataset's name.
"""

from __future__ import annotations

from importlib import metadata as _metadata
from typing import TYPE_CHECKING, Any

from ._args import Format, ListFormat, OnExhausted, Oversize, Packing
from ._native import init
from ._native import version as _library_version
from .errors import (
    AlreadyExistsError,
    BudgetWarning,
    CanceledError,
    ChangedError,
    ClosedError,
    CorruptError,
    CroupierError,
    ForkError,
    InternalError,
    InvalidArgumentError,
    LayoutWarning,
    NotFoundError,
    PermissionDeniedError,
    ResourceExhaustedError,
    StatusCode,
    UnavailableError,
)
from .permutation import Permutation, PermutationBuilder, Permutations, open_permutations
from .table import Table, cleanup, create_table, lookup, open_table, register, rewrite

if TYPE_CHECKING:
    from .dataloader import DataLoader
    from .dataset import StreamingDataset
    from .follow import Follow, FollowingDataset
    from .mixture import Mixture

# The project's version, written once in the repository's VERSION file, which
# the package metadata reads (pyproject.toml) and the Go library embeds.
__version__ = _metadata.version("croupier")

__all__ = [
    "AlreadyExistsError",
    "BudgetWarning",
    "CanceledError",
    "ChangedError",
    "ClosedError",
    "CorruptError",
    "CroupierError",
    "DataLoader",
    "Follow",
    "FollowingDataset",
    "ForkError",
    "Format",
    "InternalError",
    "InvalidArgumentError",
    "LayoutWarning",
    "ListFormat",
    "Mixture",
    "NotFoundError",
    "OnExhausted",
    "Oversize",
    "Packing",
    "PermissionDeniedError",
    "Permutation",
    "PermutationBuilder",
    "Permutations",
    "ResourceExhaustedError",
    "StatusCode",
    "StreamingDataset",
    "Table",
    "UnavailableError",
    "__version__",
    "cleanup",
    "create_table",
    "init",
    "lookup",
    "open_permutations",
    "open_table",
    "register",
    "rewrite",
    "version",
]


def version() -> str:
    """Version of the loaded Go library (loads it if needed)."""
    return _library_version()


def __getattr__(name: str) -> Any:
    # torch is heavy and optional: imported only when a dataset's name is used.
    if name == "StreamingDataset":
        from .dataset import StreamingDataset

        return StreamingDataset
    if name in ("Follow", "FollowingDataset"):
        from . import follow

        return getattr(follow, name)
    if name == "Mixture":
        from .mixture import Mixture

        return Mixture
    if name == "DataLoader":
        from . import _torch

        _torch.require("croupier.DataLoader")
        from .dataloader import DataLoader

        return DataLoader
    raise AttributeError(f"module 'croupier' has no attribute {name!r}")
