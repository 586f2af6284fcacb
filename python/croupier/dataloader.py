"""``croupier.DataLoader``: torch's DataLoader, set up for croupier's datasets."""

from __future__ import annotations

import ast
import ctypes
import functools
import gc
import multiprocessing.context
import multiprocessing.util
import os
import select
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any

import torch.utils.data
import torch.utils.data._utils.worker

from . import _native
from .dataset import LoaderHooks
from .errors import InternalError, InvalidArgumentError

if TYPE_CHECKING:
    from .dataset import StreamingDataset
    from .follow import FollowingDataset
    from .mixture import Mixture

__all__ = ["DataLoader"]

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_FEEDER_POLL_S = 0.05  # how often a worker at exit checks that its trainer wants its batches


class _WorkerStart:
    """The ``worker_init_fn`` of croupier.DataLoader's workers: binds each worker's
    life to the training process's, then runs the user's ``worker_init_fn``.

    A worker whose trainer is gone (killed, ``os._exit``) must not live on,
    holding its memory budget and batches. torch's worker loop notices the
    trainer's death within seconds (its parent process changes) and returns;
    but at exit the worker's result queue joins its feeder thread, which may be
    blocked writing a pickled batch into a pipe that nobody reads any more
    (the other workers hold its read end open), so the worker would wait
    forever. So, first, the worker replaces that join with its own
    (``_flush_at_exit``): it waits for its feeder to deliver what it sent
    while the trainer lives and wants it, and drops undelivered batches once
    the trainer is gone or shutting the workers down. It must wait otherwise:
    the workers share one lock on the queue's pipe, and a worker that exits
    while its feeder holds the lock leaves every other worker's batches stuck
    behind it. Second, on Linux, the worker dies with the trainer: a worker
    forked from a fork server (``forkserver``, the default) watches the
    trainer through a pidfd and SIGKILLs itself when it ends (its parent is
    the fork server, which lives as long as any of its children); a worker
    the trainer started itself (``spawn``) from its main thread asks the
    kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``, which
    follows the parent *thread*, hence the main thread only), and checks that
    the trainer was still its parent once it asked, lest it died just before.
    Third, once the trainer sets the loop's ``done_event`` it gives the worker
    5 s to exit: a call waiting in Go (for versions of a followed table, a
    stalled store) then ends at once (``_native.stop_waiting_when``).
    """

    def __init__(
        self, init_fn: Callable[[int], None] | None, trainer: int, watch: str | None
    ) -> None:
        """``watch`` is how the worker dies with ``trainer``: ``"pidfd"``
        (forked from a fork server), ``"parent"`` (spawned from the trainer's
        main thread, on Linux) or ``None`` (torch's loop notices alone)."""
        self.init_fn, self.trainer, self.watch = init_fn, trainer, watch

    def __call__(self, worker_id: int) -> None:
        queue, done = _loop_state(sys._getframe(1))
        # A spawned worker's parent is the trainer: its parent changing says
        # the trainer is gone. A fork server's worker is killed by its
        # watcher when the trainer ends.
        _flush_at_exit(queue, done, self.trainer if os.getppid() == self.trainer else None)
        if self.watch == "pidfd":
            _die_with_trainer(self.trainer)
        elif self.watch == "parent":
            _die_with_parent(self.trainer)
        _native.stop_waiting_when(done.is_set)
        _share_cores()
        # The objects the worker has now (torch's, croupier's, the dataset's)
        # live as long as it does: frozen, the cyclic collector no longer
        # walks them on every full collection, which took a third of a
        # worker's CPU time.
        gc.freeze()
        if self.init_fn is not None:
            self.init_fn(worker_id)


def _share_cores() -> None:
    """Give this worker's Go runtime its share of the cores: GOMAXPROCS of
    cores ÷ workers, at least 1, unless GOMAXPROCS is in the environment.

    Each worker's runtime would otherwise run as many threads as there are
    cores, its decoders and collector among them, and K workers K times as
    many: on 2 cores, 2 workers read about 11 % fewer rows a second so. The
    user's ``worker_init_fn`` runs after this and may call ``croupier.init``.
    """
    worker = torch.utils.data.get_worker_info()
    if worker is None or "GOMAXPROCS" in os.environ:
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    _native.init(gomaxprocs=max(1, (cores or 1) // worker.num_workers))


def _loop_state(frame: Any) -> tuple[Any, Any]:
    """The result queue and ``done_event`` of the torch worker loop running
    ``frame``."""
    loop = torch.utils.data._utils.worker._worker_loop.__code__
    while frame is not None and frame.f_code is not loop:
        frame = frame.f_back
    names = ("data_queue", "done_event")
    if frame is None or any(name not in frame.f_locals for name in names):
        raise InternalError(
            f"croupier.DataLoader: torch {torch.__version__} runs worker_init_fn outside its "
            "worker loop, or the loop has no data_queue or done_event: a worker could outlive "
            "its trainer"
        )
    return frame.f_locals["data_queue"], frame.f_locals["done_event"]


def _flush_at_exit(queue: Any, done: Any, trainer: int | None) -> None:
    """Make the worker loop's result ``queue`` deliver its batches at exit while
    the trainer has not set the loop's ``done`` event and, when ``trainer`` is
    given, while it is still this worker's parent; drop them otherwise (see
    ``_WorkerStart``)."""
    if not hasattr(queue, "_thread"):
        raise InternalError(
            f"croupier.DataLoader: Python {sys.version.split()[0]}'s multiprocessing.Queue has "
            "no feeder thread attribute: a worker could outlive its trainer"
        )
    queue.cancel_join_thread()
    # Priority 5: after the queue's own exit finalizer (10) tells its feeder
    # to stop once the buffer is written.
    multiprocessing.util.Finalize(
        None, _wait_for_feeder, args=(queue, done, trainer), exitpriority=5
    )


def _wait_for_feeder(queue: Any, done: Any, trainer: int | None) -> None:
    """Wait until ``queue``'s feeder thread has written its buffer, unless the
    trainer has set ``done`` or is no longer the parent ``trainer`` (it reads
    nothing more)."""
    feeder = queue._thread
    while feeder is not None and feeder.is_alive():
        if done.is_set() or (trainer is not None and os.getppid() != trainer):
            return
        feeder.join(_FEEDER_POLL_S)


def _die_with_parent(trainer: int) -> None:
    """Have the kernel SIGKILL this process when its parent thread ends; exit now
    if the parent is no longer ``trainer`` (it died before the request)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(
            err, f"croupier.DataLoader worker: prctl(PR_SET_PDEATHSIG): {os.strerror(err)}"
        )
    if os.getppid() != trainer:
        os._exit(0)


@functools.cache
def _pidfds() -> bool:
    """Whether this system opens pidfds (Linux 5.3 and Python 3.9 on), which a
    fork server's workers need to watch the trainer; elsewhere workers are
    spawned."""
    if sys.platform != "linux" or not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # ENOSYS: an older kernel
        return False
    return True


def _die_with_trainer(trainer: int) -> None:
    """SIGKILL this process once ``trainer`` ends, which a daemon thread waits
    for on a pidfd; at once if it has ended already."""
    try:
        fd = os.pidfd_open(trainer)
    except ProcessLookupError:
        os.kill(os.getpid(), signal.SIGKILL)
        return

    def watch() -> None:
        select.select([fd], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="croupier-trainer-watch", daemon=True).start()


# What a fork server imports before it forks workers. "__main__" is
# multiprocessing's own default: the training script, imported once there
# instead of in every worker.
_PRELOAD = ["__main__", "torch", "croupier"]


def _worker_context() -> multiprocessing.context.BaseContext:
    """The ``multiprocessing_context`` :class:`DataLoader` starts workers with
    when given none: ``"forkserver"``, with torch and croupier preloaded
    (``set_forkserver_preload``, which replaces the process's preload list),
    on Linux (whose workers can watch the trainer, see :class:`_WorkerStart`),
    else ``"spawn"``.

    A spawned worker imports torch before it reads a row: 2 to 3 s of CPU on
    every epoch, since workers do not persist. A fork server imports it once,
    for all of a process's DataLoaders, and forks each worker with it loaded.
    The fork server does not load croupier's Go core (croupier loads it on
    first use), so its children may.
    """
    if not _pidfds() or "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(_PRELOAD)
    return context


def _check_main_guarded(method: str) -> None:
    """Refuse to start workers from the top-level code of the training script
    outside an ``if __name__ == "__main__":`` block.

    A ``"forkserver"`` or ``"spawn"`` worker (and the fork server itself,
    which preloads ``__main__``) imports the script the training process runs
    before it unpickles the dataset: its unguarded top-level code runs again
    there, the training with it, and under torchrun waits forever in
    ``torch.distributed.init_process_group`` for ranks that never come. So
    when this call comes from the script's top-level code (its ``<module>``
    frame is on this thread's stack) at a line outside such a block, no
    worker is started. A script that cannot be read is not checked.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str):
        return  # an interactive session or ``python -c``: nothing is imported again
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and not (
        frame.f_globals is vars(main) and frame.f_code.co_name == "<module>"
    ):
        frame = frame.f_back
    if frame is None:
        return  # the script's top-level code is not running on this thread
    try:
        with open(path, "rb") as f:
            body = ast.parse(f.read(), path).body
    except (OSError, SyntaxError, ValueError):
        return
    line = frame.f_lineno
    if any(
        isinstance(node, ast.If)
        and _is_main_test(node.test)
        and node.lineno <= line <= (node.end_lineno or node.lineno)
        for node in body
    ):
        return
    raise InvalidArgumentError(
        f"croupier.DataLoader: worker processes started from the top-level code of {path} "
        f'(line {line}), outside an `if __name__ == "__main__":` block: each worker '
        f'("{method}") imports the script again before it reads a row, which would run its '
        "top-level code again there (under torchrun, init_process_group waits forever). "
        f'Put the script\'s top-level code under `if __name__ == "__main__":`, or read in '
        "this process (num_workers=0)"
    )


def _is_main_test(test: ast.expr) -> bool:
    """Whether ``test`` is ``__name__ == "__main__"`` (either way round)."""
    if not (
        isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
    ):
        return False
    sides = {ast.dump(test.left), ast.dump(test.comparators[0])}
    return sides == {ast.dump(ast.Name("__name__", ast.Load())), ast.dump(ast.Constant("__main__"))}


@functools.cache
def _note_reads_in_process(num_workers: int) -> None:
    """Say, once a process, that asked-for workers were not started."""
    warnings.warn(
        f"croupier.DataLoader: num_workers={num_workers} starts no worker processes: the "
        "dataset runs no Python code of yours, so the Go core reads it in this process, on "
        "every core (loader.num_workers is 0). in_process=False starts them anyway "
        "(docs/tuning.md says what each costs)",
        stacklevel=3,
    )


def _reads_in_process(
    dataset: LoaderHooks,
    in_process: bool | None,
    kwargs: dict[str, Any],
) -> bool:
    """Whether :class:`DataLoader` reads ``dataset`` in the training process
    although workers are asked for (see its doc)."""
    if in_process is False:
        return False
    if in_process:
        if kwargs.get("worker_init_fn") is not None:
            raise InvalidArgumentError(
                "croupier.DataLoader: in_process=True starts no workers to run worker_init_fn"
            )
        return True
    return all(collate is None for collate in dataset._loader_collates()) and all(
        kwargs.get(name) is None
        for name in ("collate_fn", "worker_init_fn", "multiprocessing_context")
    )


class DataLoader(torch.utils.data.DataLoader[Any]):
    """A thin :class:`torch.utils.data.DataLoader` for a :class:`StreamingDataset`,
    a :class:`Mixture` or a :class:`FollowingDataset`.

    Differences from torch's loader:

    - ``batch_size`` is always None: the dataset yields whole batches.
    - a dataset whose batches run no Python code of the user's (no
      ``collate``, ``collate_fn`` or ``worker_init_fn``, and no
      ``multiprocessing_context`` asked for) is read in the training
      process whatever ``num_workers`` says: croupier's Go core already
      decodes there on every core, beside the training loop and without the
      GIL, with the whole memory budget, and worker processes would only add
      copies of every row between processes and their start-up. The loader's
      ``num_workers`` is then 0, what runs, and a :class:`UserWarning` says
      so once for each ``num_workers`` asked. ``in_process=False`` starts the workers
      anyway; ``in_process=True`` reads in this process also with a
      ``collate`` or ``collate_fn`` (not with a ``worker_init_fn``).
    - worker processes are forked from a fork server that has imported torch
      and croupier (``multiprocessing_context`` is ``"forkserver"`` with those
      modules preloaded, on Linux), so that a worker starts in a fraction of
      a second instead of importing torch anew each epoch;
      ``"spawn"`` or another ``"forkserver"`` context may be passed, and
      ``"fork"`` is refused (the Go core does not survive ``fork()``).
      Either imports the training script again in the worker, as
      multiprocessing does: workers started from the script's top-level code
      outside an ``if __name__ == "__main__":`` block are refused, as that
      code would run again in each of them.
    - it counts each batch it hands to the training loop, so
      ``loader.state_dict()`` (the same dict as ``dataset.state_dict()``) is
      exact after every batch, with any ``num_workers``.
    - ``persistent_workers=True`` and ``in_order=False`` are refused: workers kept
      across epochs would not see ``set_epoch`` or ``load_state_dict``, and
      batches must reach the training loop in step order.
    - each of the K workers gets ``(memory_budget - K * 96 MiB) // K`` of the
      dataset's memory budget (``512 MiB // K`` when the dataset sets none:
      the allowances then come on top of the default): each
      worker process's own memory beyond its share (its copy of the library
      and the Go runtime, the interpreter's pages it touches) is set aside
      first (``croupier.dataset.WORKER_ALLOWANCE``), so that the process tree
      stays within the bound one process keeps (docs/tuning.md), and a budget
      of ``K * 96 MiB`` or less is refused with an InvalidArgumentError from
      the workers. Where the workers send runs of
      steps, three quarters of it for the worker's Go stream, and a quarter
      for the runs waiting in its slots for this process (see
      ``croupier._runs``); ``divide_budget=False`` gives each worker all of it.
    - workers share every step: each deals the rows of its own blocks of the
      table, so that a page is decoded by one worker and each holds rows for as
      many steps ahead in its share of the budget as one process does in all
      of it. Each sends its rows of every run of up to 16 consecutive steps
      (fewer where the steps are large: a step holding a row far larger than
      the rest crosses alone), in Arrow, through shared-memory slots of its
      own, and this process merges
      the workers' parts of each run and converts them to the dataset's
      format (see ``croupier._runs``). Workers convert batches themselves and
      deal single steps in turns, as with torch's loader, when the dataset has
      a ``collate``, a ``collate_fn`` is given or ``pin_memory`` is set.
    - workers do not collect their startup objects (torch's, the dataset's)
      with Python's cyclic collector: they are frozen (``gc.freeze()``) before
      the ``worker_init_fn`` runs.
    - a Mixture's or a FollowingDataset's workers make single steps in turns
      (worker k makes steps k, k + K, ...), converted, each with the dataset's
      position after it, which this process takes as it hands the step over.
      A FollowingDataset's iteration ends at the last step delivered in order
      when a worker's wait for versions times out (see
      :class:`FollowingDataset`).
    - workers never outlive the training process: killed, or ended by
      ``os._exit``, it leaves none behind holding memory (see ``_WorkerStart``).
    - each worker's Go runtime runs on its share of the cores (``GOMAXPROCS``
      of cores ÷ K, at least 1) unless ``GOMAXPROCS`` is set in the
      environment; a ``worker_init_fn`` may call :func:`croupier.init`.

    Args:
        dataset: the dataset, mixture or following dataset to load.
        num_workers: worker processes (0: the batches are made in this process).
        divide_budget: give each worker its share of the dataset's memory
            budget, as above (True), or all of it (False).
        in_process: read the dataset in this process however many workers
            are asked for (True), start them (False), or decide as above
            (None).
        kwargs: other arguments of :class:`torch.utils.data.DataLoader`
            (``pin_memory``, ``prefetch_factor``, ...).
    """

    dataset: StreamingDataset | Mixture | FollowingDataset

    def __init__(
        self,
        dataset: StreamingDataset | Mixture | FollowingDataset,
        num_workers: int = 0,
        *,
        divide_budget: bool = True,
        in_process: bool | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(dataset, LoaderHooks):
            raise TypeError(
                f"croupier.DataLoader needs a croupier.StreamingDataset, Mixture or "
                f"FollowingDataset, got {type(dataset).__name__}"
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
        if num_workers > 0 and _reads_in_process(dataset, in_process, kwargs):
            if in_process is None:
                _note_reads_in_process(num_workers)
            num_workers = 0
            for name in ("prefetch_factor", "multiprocessing_context"):  # workers' own
                kwargs.pop(name, None)
        if num_workers > 0:
            if kwargs.get("multiprocessing_context") is None:
                kwargs["multiprocessing_context"] = _worker_context()
            context = kwargs["multiprocessing_context"]
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
        return self.dataset._from_workers(self, self._from_workers())

    def _from_workers(self) -> Iterator[Any]:
        """torch's iterator over what the workers send.

        Workers share runs of steps and send their rows in Arrow, for this
        process to merge and convert (see croupier._runs), unless something must run on
        converted batches in the workers: the dataset's collate, a collate_fn,
        pinning. They divide the dataset's memory budget unless divide_budget
        is False. A Mixture's workers send single converted steps with the
        mixture's position after each (croupier.mixture.MixtureStep), and its
        sources divide their budgets; a FollowingDataset's send single
        converted steps with their rounds (croupier.follow.FollowStep). Only
        the copies of the dataset the workers get are told to.
        """
        init_fn = self.worker_init_fn
        method = self.multiprocessing_context.get_start_method()
        watch = None
        if method == "forkserver" and _pidfds():
            watch = "pidfd"
        elif method == "spawn" and sys.platform == "linux":
            # PR_SET_PDEATHSIG follows the parent thread: the main one only.
            main = threading.current_thread() is threading.main_thread()
            watch = "parent" if main else None
        _check_main_guarded(method)
        self.worker_init_fn = _WorkerStart(init_fn, os.getpid(), watch)
        self.dataset._tell_workers(self, True)
        try:
            return super().__iter__()  # starts the workers: they get the dataset now
        finally:
            self.dataset._tell_workers(self, False)
            self.worker_init_fn = init_fn

    def __len__(self) -> int:
        """Batches the next iteration yields: the steps left in the dataset's epoch
        (``len(dataset)``), also after a resume. A Mixture and a FollowingDataset
        have no length."""
        return self.dataset._loader_length()

    def state_dict(self) -> dict[str, Any]:
        """The dataset's checkpoint (docs/concepts.md), exact after every delivered batch."""
        return self.dataset.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any], *, table_moved: bool = False) -> None:
        """Load a checkpoint into the dataset; the next iteration continues from it.

        ``table_moved`` is :meth:`StreamingDataset.load_state_dict`'s (a Mixture
        and a FollowingDataset take none).
        """
        self.dataset._loader_load(state_dict, table_moved)
