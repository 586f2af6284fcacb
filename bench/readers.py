"""The readers the loader benchmark compares, each built the way its
documentation says to train with it, over the same rows.

Every reader yields dicts of torch tensors holding ``id`` and the workload's
projected columns; list columns are packed (values + ``_offsets``), the layout
croupier delivers. Readers that produce Arrow data go through the same
conversion as croupier (``croupier.formats.convert``), so that conversion costs
are equal and the comparison is of reading, decoding and ordering.

A reader is built in the measuring process by :func:`build` from a
:class:`Spec`; peers import their library there only.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import torch.utils.data
from measure import record_worker_start
from workloads import Data

from croupier.formats import convert

Batches = Iterable[dict[str, Any]]

# HF datasets' default shuffle buffer (rows), used as is.
HF_SHUFFLE_BUFFER = 1000


@dataclass(frozen=True)
class ReaderKind:
    """A reader the benchmark can run: its label, library and the orders it deals."""

    name: str
    label: str
    orders: tuple[str, ...]  # croupier's order names where it offers them, else its own
    module: str | None = None  # the module it needs beyond croupier, pyarrow and torch
    package: str | None = None  # the package that provides module, for messages


KINDS: dict[str, ReaderKind] = {
    k.name: k
    for k in (
        ReaderKind("pyarrow", "pyarrow iter_batches → torch", ("sequential",)),
        ReaderKind(
            "croupier", "croupier", ("sequential", "clumped", "window", "full", "auto", "pow2")
        ),
        ReaderKind(
            "lancedb",
            "LanceDB StreamingDataset",
            ("sequential", "clumped", "full"),
            "lancedb",
            "lancedb",
        ),
        ReaderKind("torch-map", "torch map-style Dataset over pyarrow", ("full",)),
        ReaderKind("hf", "HF datasets streaming", ("buffer",), "datasets", "datasets"),
        ReaderKind("lance-batch", "Lance LanceDataset", ("batch",), "lance", "pylance"),
        ReaderKind("lance-take", "Lance take, map-style", ("full",), "lance", "pylance"),
        ReaderKind(
            "mosaic", "MosaicML StreamingDataset", ("py1e",), "streaming", "mosaicml-streaming"
        ),
    )
}


def missing(kind: ReaderKind) -> str | None:
    """Why the reader cannot run here (its library is not installed), or None."""
    if kind.module and importlib.util.find_spec(kind.module) is None:
        return f"{kind.package} not installed"
    return None


@dataclass(frozen=True)
class Spec:
    """One reader over one workload: what the measuring process builds."""

    kind: str
    order: str
    data_folder: str
    workload: str
    rows: int
    table_uri: str  # croupier: the table (file:// or s3://)
    perm_uri: str | None  # croupier: the persisted permutation of the order, if not sequential
    num_splits: int
    clump: int
    workers: int
    seed: int
    memory_budget: int | None = None  # croupier: each stream's memory_budget (None: default)
    rank: int = 0  # croupier: this process's rank of world_size
    world_size: int = 1
    # croupier: with workers, read in this process where the loader would
    # (None: cr.DataLoader decides) or start worker processes (False)
    in_process: bool | None = None
    # croupier: open_table's cache_dir ("": none; None: not passed); MosaicML:
    # its local folder for the shards of peer_uri
    cache_dir: str | None = None
    # peers: the folder of their conversion on an S3 server, as internal/s3serve
    # names it (s3://bucket/prefix?endpoint=…); None: the local one in data_folder
    peer_uri: str | None = None


@dataclass
class Reader:
    """A way to read the epoch from its start, and from a later global step."""

    make: Callable[[], Batches]
    resume: Callable[[int], Batches] | None
    steps: int  # global steps in the epoch
    stats: Callable[[], dict[str, int]] | None = None  # the reader's own counters of its pass


def to_torch(data: pa.Table | pa.RecordBatch) -> dict[str, Any]:
    """Arrow data as torch tensors, with croupier's conversion."""
    if isinstance(data, pa.Table):
        data = data.combine_chunks().to_batches()[0]
    return convert(data, "torch")


def _identity(batch: Any) -> Any:
    return batch


def warm_up() -> None:
    """Convert a tiny batch: the first conversion of a process imports parts of
    torch lazily (about 10 MB of reads), which must not count as reading data."""
    to_torch(pa.record_batch({"x": pa.array([[1]], type=pa.list_(pa.int32()))}))


def _worker_start(worker_id: int) -> None:
    """``worker_init_fn`` of croupier's DataLoader workers."""
    warm_up()
    record_worker_start(worker_id)


def build(spec: Spec) -> Reader:
    """The reader ``spec`` describes."""
    from workloads import WORKLOADS

    data = Data(WORKLOADS[spec.workload], Path(spec.data_folder), spec.rows)
    return _BUILDERS[spec.kind](spec, data)


def s3_location(uri: str) -> tuple[str, dict[str, str]]:
    """An S3 URI as croupier takes it (``s3://bucket/prefix?endpoint=…&region=…``)
    as the path and ``storage_options`` Lance and LanceDB take (object_store's
    keys)."""
    parts = urllib.parse.urlsplit(uri)
    query = dict(urllib.parse.parse_qsl(parts.query))
    options = {"endpoint": query["endpoint"], "region": query.get("region", "us-east-1")}
    if query.get("disable_https") == "true" or query["endpoint"].startswith("http:"):
        options["allow_http"] = "true"
    if query.get("anonymous") == "true":
        options["skip_signature"] = "true"
    if query.get("use_path_style") == "true":
        options["virtual_hosted_style_request"] = "false"
    return urllib.parse.urlunsplit(parts._replace(query="")), options


def _cache_option(open_fn: Callable[..., Any], spec: Spec) -> dict[str, str]:
    """``cache_dir`` for ``open_fn`` where the spec sets one and it takes it."""
    if spec.cache_dir is None or "cache_dir" not in inspect.signature(open_fn).parameters:
        return {}
    return {"cache_dir": spec.cache_dir}


def _croupier(spec: Spec, data: Data) -> Reader:
    import croupier as cr

    g = data.workload.batch
    opened: list[cr.StreamingDataset] = []

    def dataset() -> cr.StreamingDataset:
        if spec.perm_uri is None:
            source: cr.Table | cr.Permutation = cr.open_table(
                spec.table_uri, **_cache_option(cr.open_table, spec)
            )
        else:
            opts = _cache_option(cr.open_permutations, spec)
            source = cr.open_permutations(spec.perm_uri, **opts)[0]
        ds = cr.StreamingDataset(
            source,
            global_batch_size=g,
            num_splits=spec.num_splits,
            columns=data.workload.read_columns(),
            memory_budget=spec.memory_budget,
            rank=spec.rank,
            world_size=spec.world_size,
        )
        opened.append(ds)
        return ds

    def loader(ds: cr.StreamingDataset) -> Batches:
        if not spec.workers:
            return cr.DataLoader(ds)
        if spec.in_process is None:  # as a user asks for them
            return cr.DataLoader(ds, num_workers=spec.workers)
        return cr.DataLoader(
            ds,
            num_workers=spec.workers,
            worker_init_fn=_worker_start,
            in_process=spec.in_process,
        )

    def resume(step: int) -> Batches:
        ds = dataset()
        ds.load_state_dict({**ds.state_dict(), "steps_consumed": step})
        return loader(ds)

    def stats() -> dict[str, int]:
        """``stats()`` of the first pass's dataset (empty with workers: theirs)."""
        return opened[0].stats() if opened else {}

    return Reader(lambda: loader(dataset()), resume, data.rows // g, stats)


def _parquet_batches(data: Data, first_row: int = 0) -> Iterator[dict[str, Any]]:
    """The files in order from row ``first_row``, in batches of the global batch size."""
    per_file = data.rows // len(data.files)
    rg = data.workload.row_group_rows
    for f, path in enumerate(data.files):
        skip = first_row - f * per_file
        if skip >= per_file:
            continue
        groups = range(max(skip, 0) // rg, per_file // rg)
        skip = max(skip, 0) % rg
        pf = pq.ParquetFile(path)
        for rb in pf.iter_batches(
            batch_size=data.workload.batch,
            row_groups=groups,
            columns=data.workload.read_columns(),
        ):
            if skip:
                rb, skip = rb.slice(min(skip, rb.num_rows)), max(skip - rb.num_rows, 0)
            if rb.num_rows:
                yield to_torch(rb)


def _pyarrow(spec: Spec, data: Data) -> Reader:
    g = data.workload.batch
    return Reader(
        lambda: _parquet_batches(data),
        lambda step: _parquet_batches(data, step * g),
        data.rows // g,
    )


class TakeDataset(torch.utils.data.Dataset):
    """A map-style dataset whose batches are one ``take(indices)`` of an Arrow source."""

    def __init__(self, take: Callable[[list[int]], pa.Table], rows: int) -> None:
        self._take = take
        self._rows = rows

    def __len__(self) -> int:
        return self._rows

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.__getitems__([index])

    def __getitems__(self, indices: list[int]) -> dict[str, Any]:
        return to_torch(self._take(indices))


def _random_batches(spec: Spec, data: Data, take: Callable[[list[int]], pa.Table]) -> Batches:
    ds = TakeDataset(take, data.rows)
    sampler = torch.utils.data.RandomSampler(ds, generator=torch.Generator().manual_seed(spec.seed))
    return torch.utils.data.DataLoader(
        ds, batch_size=data.workload.batch, sampler=sampler, collate_fn=_identity
    )


def _torch_map(spec: Spec, data: Data) -> Reader:
    def make() -> Batches:
        table = pq.read_table(data.parquet, columns=data.workload.read_columns())
        return _random_batches(spec, data, table.combine_chunks().take)

    return Reader(make, None, data.rows // data.workload.batch)


def _lancedb(spec: Spec, data: Data) -> Reader:
    import lancedb
    from lancedb.streaming import StreamingDataLoader, StreamingDataset

    g = data.workload.batch
    split_rows = g // spec.num_splits

    def rows(batch: pa.RecordBatch) -> list[tuple[pa.RecordBatch, int]]:
        # The transform yields one item per row; a reference to the row keeps
        # the data in Arrow until collate gathers the batch with one take.
        return [(batch, i) for i in range(batch.num_rows)]

    def collate(items: list[tuple[pa.RecordBatch, int]]) -> dict[str, Any]:
        first: dict[int, int] = {}  # id(batch) -> its first row in the concatenation
        parts: list[pa.RecordBatch] = []
        take = []
        for batch, i in items:
            if id(batch) not in first:
                first[id(batch)] = sum(p.num_rows for p in parts)
                parts.append(batch)
            take.append(first[id(batch)] + i)
        return to_torch(pa.Table.from_batches(parts).take(take))

    def dataset() -> StreamingDataset:
        if spec.peer_uri is None:
            db = lancedb.connect(str(data.lancedb))
        else:
            path, options = s3_location(spec.peer_uri)
            db = lancedb.connect(path, storage_options=options)
        table = db.open_table("rows")
        return StreamingDataset(
            table,
            num_splits=spec.num_splits,
            shuffle=spec.order != "sequential",
            shuffle_clump_size=spec.clump if spec.order == "clumped" else None,
            shuffle_seed=spec.seed,
            columns=data.workload.read_columns(),
            transform=rows,
        )

    def loader(ds: StreamingDataset) -> Batches:
        return StreamingDataLoader(ds, batch_size=g, collate_fn=collate)

    def resume(step: int) -> Batches:
        ds = dataset()
        state = ds.state_dict()
        consumed = [step * split_rows] * spec.num_splits
        ds.load_state_dict(
            {
                **state,
                "samples_consumed_per_split": consumed,
                "positions_consumed_per_split": consumed,
            }
        )
        return loader(ds)

    return Reader(lambda: loader(dataset()), resume, data.rows // g)


def _lance_take(spec: Spec, data: Data) -> Reader:
    import lance

    def make() -> Batches:
        if spec.peer_uri is None:
            ds = lance.dataset(str(data.lance))
        else:
            path, options = s3_location(spec.peer_uri)
            ds = lance.dataset(f"{path}/{data.lance.name}", storage_options=options)
        cols = data.workload.read_columns()
        return _random_batches(spec, data, lambda idx: ds.take(idx, columns=cols))

    return Reader(make, None, data.rows // data.workload.batch)


def _lance_batch(spec: Spec, data: Data) -> Reader:
    from lance.sampler import ShardedBatchSampler
    from lance.torch.data import LanceDataset

    def make() -> Batches:
        return LanceDataset(
            str(data.lance),
            batch_size=data.workload.batch,
            columns=data.workload.read_columns(),
            sampler=ShardedBatchSampler(0, 1, randomize=True, seed=spec.seed),
            to_tensor_fn=lambda batch, **_: to_torch(batch),
        )

    return Reader(make, None, data.rows // data.workload.batch)


def _hf(spec: Spec, data: Data) -> Reader:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import datasets

    def make() -> Batches:
        ds = datasets.load_dataset(
            "parquet",
            data_files=[str(p) for p in data.files],
            columns=data.workload.read_columns(),
            split="train",
            streaming=True,
        )
        ds = ds.shuffle(seed=spec.seed, buffer_size=HF_SHUFFLE_BUFFER).with_format("arrow")
        return (to_torch(t) for t in ds.iter(batch_size=data.workload.batch))

    return Reader(make, None, data.rows // data.workload.batch)


def _mosaic(spec: Spec, data: Data) -> Reader:
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    g = data.workload.batch
    cols = data.workload.read_columns()
    schema = pq.read_schema(data.files[0])
    types = [schema.field(c).type for c in cols]

    def collate(samples: list[dict[str, Any]]) -> dict[str, Any]:
        # MDS hands back numpy values (bools as uint8): cast to the Parquet types
        arrays = [
            pa.array([s[c] for s in samples]).cast(t) for c, t in zip(cols, types, strict=True)
        ]
        return to_torch(pa.RecordBatch.from_arrays(arrays, names=cols))

    where: dict[str, str] = {"local": str(data.mds)}
    if spec.peer_uri is not None:
        # Shards are downloaded into cache_dir; boto3 finds the server through
        # the variable MosaicML's S3 downloads read. MosaicML 0.13 turns to
        # unsigned requests only when creating its client fails for want of
        # credentials, which botocore reports at the first request instead: it
        # signs with placeholder keys, which a server serving anonymous reads
        # does not check.
        if spec.cache_dir is None:
            raise ValueError("MosaicML over S3 needs cache_dir, the folder of its shards")
        path, options = s3_location(spec.peer_uri)
        os.environ["S3_ENDPOINT_URL"] = options["endpoint"]
        os.environ.setdefault("AWS_DEFAULT_REGION", options["region"])
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "anonymous")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "anonymous")
        where = {"remote": path, "local": spec.cache_dir}

    def dataset() -> StreamingDataset:
        return StreamingDataset(**where, shuffle=True, shuffle_seed=spec.seed, batch_size=g)

    def loader(ds: StreamingDataset) -> Batches:
        return torch.utils.data.DataLoader(ds, batch_size=g, collate_fn=collate)

    def resume(step: int) -> Batches:
        ds = dataset()
        # what a checkpoint taken in epoch 0 holds (a fresh dataset's says epoch -1)
        state = ds.state_dict(num_samples=step * g, from_beginning=True)
        ds.load_state_dict({**state, "epoch": 0})
        return loader(ds)

    return Reader(lambda: loader(dataset()), resume, data.rows // g)


_BUILDERS: dict[str, Callable[[Spec, Data], Reader]] = {
    "croupier": _croupier,
    "lancedb": _lancedb,
    "pyarrow": _pyarrow,
    "torch-map": _torch_map,
    "lance-take": _lance_take,
    "lance-batch": _lance_batch,
    "hf": _hf,
    "mosaic": _mosaic,
}
