"""``croupier.DataLoader``: torch's DataLoader, set up for a StreamingDataset."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch.utils.data

from .dataset import Steps, StreamingDataset
from .errors import InternalError, InvalidArgumentError

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
    - ``persistent_workers=True`` and ``in_order=False`` are refused: workers kept
      across epochs would not see ``set_epoch`` or ``load_state_dict``, and
      batches must reach the training loop in step order.
    - each of the K workers gets ``memory_budget // K`` of the dataset's memory
      budget (its default when the dataset has none), so that the workers
      together hold what one process would; ``divide_budget=False`` gives each
      worker all of it.
    - workers deal runs of 16 consecutive steps in turns (worker k makes runs
      k, k + K, ...), which touch fewer row groups than every K-th step in
      orders with locality, send each run in Arrow as one item, and this
      process converts them to the dataset's format: torch hands over each
      tensor through a shared-memory file of its own, which costs more than
      making the step. torch takes one item from each worker in turn, so the
      runs arrive in step order. Workers convert batches themselves and deal
      single steps in turns, as with torch's loader, when the dataset has a
      ``collate``, a ``collate_fn`` is given or ``pin_memory`` is set.

    Args:
        dataset: the dataset to load.
        num_workers: worker processes (0: the batches are made in this process).
        divide_budget: give each worker ``memory_budget // num_workers`` of the
            dataset's memory budget (True), or all of it (False).
        kwargs: other arguments of :class:`torch.utils.data.DataLoader`
            (``pin_memory``, ``prefetch_factor``, ...).
    """

    dataset: StreamingDataset

    def __init__(
        self,
        dataset: StreamingDataset,
        num_workers: int = 0,
        *,
        divide_budget: bool = True,
        **kwargs: Any,
    ) -> None:
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
        if not kwargs.get("in_order", True):
            raise InvalidArgumentError(
                "croupier.DataLoader: in_order=False is not supported: it delivers every "
                "step in order, and counts them for exact checkpoints"
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
        self.divide_budget = bool(divide_budget)
        dataset._loader_counts = True

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        if self.num_workers == 0:
            return super().__iter__()  # the dataset counts what it yields in this process
        return self._counted(self._from_workers())

    def _from_workers(self) -> Iterator[Any]:
        """torch's iterator over what the workers send.

        Workers deal runs of steps and send them in Arrow, for this process to
        convert (see croupier.dataset.Steps), unless something must run on
        converted batches in the workers: the dataset's collate, a collate_fn,
        pinning. They divide the dataset's memory budget unless divide_budget
        is False. Only the copies of the dataset the workers get are told to.
        """
        ds = self.dataset
        ds._send_runs = (
            ds._collate is None
            and self.collate_fn is torch.utils.data.default_convert
            and not self.pin_memory
        )
        ds._divide_budget = self.divide_budget
        try:
            return super().__iter__()  # starts the workers: they get the dataset now
        finally:
            ds._send_runs = ds._divide_budget = False

    def _counted(self, batches: Iterator[Any]) -> Iterator[Any]:
        ds = self.dataset
        for batch in batches:
            if not isinstance(batch, Steps):
                ds._count_delivered()
                yield batch
                continue
            # torch takes one item from each worker in turn, and worker k sends
            # runs k, k + K, ...: each run begins at the next step.
            if batch.first != ds.steps_consumed:
                raise InternalError(
                    f"croupier.DataLoader: a worker sent steps {batch.first} to "
                    f"{batch.first + batch.steps - 1} of epoch {ds.epoch} when step "
                    f"{ds.steps_consumed} was next"
                )
            for out in ds._convert(batch.batch, batch.steps):
                out = self.collate_fn(out)
                ds._count_delivered()
                yield out

    def state_dict(self) -> dict[str, Any]:
        """The dataset's checkpoint (docs/concepts.md), exact after every delivered batch."""
        return self.dataset.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Load a checkpoint into the dataset; the next iteration continues from it."""
        self.dataset.load_state_dict(state_dict)
