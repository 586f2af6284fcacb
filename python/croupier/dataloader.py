"""``croupier.DataLoader``: torch's DataLoader, set up for a StreamingDataset."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch.utils.data

from .dataset import StreamingDataset
from .errors import InvalidArgumentError

__all__ = ["DataLoader"]


class DataLoader(torch.utils.data.DataLoader):
    """A thin :class:`torch.utils.data.DataLoader` for a :class:`StreamingDataset`.

    Differences from torch's loader:

    - ``batch_size`` is always None: the dataset yields whole batches.
    - worker processes start with ``multiprocessing_context="spawn"`` unless
      ``"forkserver"`` is passed; ``"fork"`` is refused (the Go core does not
      survive ``fork()``).
    - it counts each batch it hands to the training loop, so
      ``loader.state_dict()`` (the same dict as ``dataset.state_dict()``) is
      exact after every batch, with any ``num_workers``.
    - ``persistent_workers=True`` is refused: workers kept across epochs would not
      see ``set_epoch`` or ``load_state_dict``.

    Other keyword arguments (``pin_memory``, ``prefetch_factor``, ...) go to torch.
    """

    dataset: StreamingDataset

    def __init__(self, dataset: StreamingDataset, num_workers: int = 0, **kwargs: Any) -> None:
        if not isinstance(dataset, StreamingDataset):
            raise TypeError(
                f"croupier.DataLoader needs a croupier.StreamingDataset, got "
                f"{type(dataset).__name__}"
            )
        if kwargs.pop("batch_size", None) is not None:
            raise InvalidArgumentError(
                "croupier.DataLoader: batch_size must be None; set global_batch_size on "
                "the StreamingDataset"
            )
        if kwargs.get("persistent_workers"):
            raise InvalidArgumentError(
                "croupier.DataLoader: persistent_workers=True is not supported: workers kept "
                "across epochs would not see set_epoch() or load_state_dict()"
            )
        if num_workers > 0:
            context = kwargs.setdefault("multiprocessing_context", "spawn")
            method = context if isinstance(context, str) else context.get_start_method()
            if method == "fork":
                raise InvalidArgumentError(
                    'croupier.DataLoader: multiprocessing_context="fork" is not supported: '
                    'the Go core does not survive fork(); use "spawn" or "forkserver"'
                )
        super().__init__(dataset, batch_size=None, num_workers=num_workers, **kwargs)
        dataset._loader_counts = True

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        batches = super().__iter__()
        if self.num_workers == 0:
            return batches  # the dataset counts what it yields in this process
        return self._counted(batches)

    def _counted(self, batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            self.dataset._count_delivered()
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """The dataset's checkpoint (SPEC §4), exact after every delivered batch."""
        return self.dataset.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Load a checkpoint into the dataset; the next iteration continues from it."""
        self.dataset.load_state_dict(state_dict)
