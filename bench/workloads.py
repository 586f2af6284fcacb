"""The benchmarks' data: one generator per workload, written once as Parquet,
converted once to Lance and MDS for the peers and to a croupier table, all
cached.

Workloads:

``lm``
    pretokenized language-model rows: ``id``, ``tokens`` list<int32> of
    512-2,048 token ids (2-8 KB a row). Every column is read.
``rl``
    RL rollouts: the 12 columns of ``examples/rl_learner.py``'s schema plus
    ``id`` and 18 more a generation fleet logs (prompt and completion text of
    1-4 KB each, input tokens, reference logprobs, metadata): 31 columns, of
    which a learner reads ``output_tokens``, ``output_logprobs`` and
    ``advantage``.
``scalar``
    small rows of 8 fixed-width columns (43 bytes); every column is read.
``rollout``
    narrow RL rollouts: ``id``, ``output_tokens`` list<int32> of 128-640 token
    ids, ``output_logprobs`` list<float32> of the same length, ``reward``
    (about 3 KB a row), in row groups of 16,384 rows with pyarrow's default
    pages (1 MiB) and no page index (pyarrow's default too). Every column is
    read.

Rows are generated one row group at a time from ``(seed, row group)``, so a
table is the same bytes on every machine. Row ids are consecutive from 0 in file
order, and every file holds a whole number of row groups, so the row group of a
row is ``id // row_group_rows``. Beside the Parquet files the cache keeps
``row_bytes.npy``: the Arrow bytes of each row's projected columns (values and
offsets), which turns the ids a reader delivered into the bytes it delivered.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from rl_learner import COLUMNS as RL_COLUMNS
from rl_learner import SCHEMA as ROLLOUT_SCHEMA

# Bump when a generator changes, so that cached tables are written again.
GENERATOR_VERSION = 1
VOCAB = 50_257

Generator = Callable[[np.random.Generator, int, int], pa.Table]


@dataclass(frozen=True)
class Workload:
    """A table to read and how a trainer reads it."""

    name: str
    description: str
    rows: int  # default size; a multiple of files * row_group_rows
    row_group_rows: int
    files: int
    batch: int  # global batch size
    columns: tuple[str, ...]  # projected columns; "id" is always read as well
    generate: Generator  # (rng, first id, rows) -> one row group
    page_index: bool = True  # the Parquet files have a page index
    page_bytes: int | None = None  # Parquet data page size (None: pyarrow's default)

    def read_columns(self) -> list[str]:
        """The columns every reader reads: ``id`` and the projection."""
        return ["id", *[c for c in self.columns if c != "id"]]


def _lists(lengths: np.ndarray, values: np.ndarray) -> pa.ListArray:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))


def lm_rows(rng: np.random.Generator, first: int, n: int) -> pa.Table:
    """Pretokenized LM rows: 512-2,048 int32 token ids each."""
    lengths = rng.integers(512, 2049, n)
    values = rng.integers(0, VOCAB, int(lengths.sum()), dtype=np.int32)
    return pa.table(
        {
            "id": pa.array(np.arange(first, first + n, dtype=np.int64)),
            "tokens": _lists(lengths, values),
        }
    )


_WORDS: list[str] = []


def _text(rng: np.random.Generator, n: int, low: int, high: int) -> pa.Array:
    """``n`` strings of ``low``-``high`` characters of made-up words (text that
    compresses about as well as prose)."""
    if not _WORDS:
        wrng = np.random.default_rng(0)
        letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
        _WORDS.extend("".join(wrng.choice(letters, k)) for k in wrng.integers(2, 11, 4000))
    words = np.array(_WORDS)
    lengths = rng.integers(low, high + 1, n)
    ends = np.cumsum(lengths)
    # words average 6.5 letters and a space: draw enough, then cut consecutive slices
    corpus = " ".join(words[rng.integers(0, len(words), int(ends[-1]) // 6 + 64)])
    return pa.array(
        [corpus[e - k : e] for e, k in zip(ends.tolist(), lengths.tolist(), strict=True)]
    )


def _tokens_and_logprobs(
    rng: np.random.Generator, lengths: np.ndarray
) -> tuple[pa.ListArray, pa.ListArray]:
    """Sampled token ids and their log-probs, ``lengths[i]`` of each in row i."""
    tokens = _lists(lengths, rng.integers(0, VOCAB, lengths.sum(), np.int32))
    logprobs = _lists(lengths, rng.normal(-2, 1, lengths.sum()).astype(np.float32))
    return tokens, logprobs


def rl_rows(rng: np.random.Generator, first: int, n: int) -> pa.Table:
    """RL rollouts: ``examples/rl_learner.py``'s columns, ``id`` and 18 more."""
    ids = np.arange(first, first + n, dtype=np.int64)
    problem = ids // 8
    out_len = rng.integers(256, 1025, n)
    in_len = rng.integers(128, 513, n)
    rewards = rng.random(n, dtype=np.float32)
    finish = np.where(rng.random(n) < 0.9, "stop", "length")
    output_tokens, output_logprobs = _tokens_and_logprobs(rng, out_len)
    values = {
        "rollout_id": pa.array(
            [f"p{p}-{i % 8}" for p, i in zip(problem.tolist(), ids.tolist(), strict=True)]
        ),
        "problem_id": pa.array(problem),
        "sequence_order": pa.array(np.ones(n, dtype=np.int32)),
        "role": pa.array(["assistant"] * n),
        "output_tokens": output_tokens,
        "output_logprobs": output_logprobs,
        "reward": pa.array(rewards),
        "advantage": pa.array(rewards - np.float32(0.5)),
        "include_in_training": pa.array(finish == "stop"),
        "policy_version": pa.array((ids // 4096).astype(np.int32)),
        "finish_reason": pa.array(finish),
        "generator": pa.array([f"sampler-{p % 3}" for p in problem.tolist()]),
    }
    extra = {
        "prompt_text": _text(rng, n, 1024, 4096),
        "completion_text": _text(rng, n, 1024, 4096),
        "system_prompt": _text(rng, n, 200, 600),
        "input_tokens": _lists(in_len, rng.integers(0, VOCAB, in_len.sum(), np.int32)),
        "ref_logprobs": _lists(out_len, rng.normal(-2, 1, out_len.sum()).astype(np.float32)),
        "kl": pa.array(rng.random(n, dtype=np.float32) * 0.1),
        "entropy": pa.array(rng.random(n, dtype=np.float32) * 3),
        "value": pa.array(rng.normal(0, 1, n).astype(np.float32)),
        "returns": pa.array(rng.normal(0, 1, n).astype(np.float32)),
        "num_input_tokens": pa.array(in_len.astype(np.int32)),
        "num_output_tokens": pa.array(out_len.astype(np.int32)),
        "created_at_ms": pa.array(1_700_000_000_000 + ids * 1000),
        "environment": pa.array(np.array(["math", "code", "chat", "tools"])[ids % 4]),
        "task_id": pa.array([f"task-{p:08d}" for p in problem.tolist()]),
        "temperature": pa.array(np.full(n, 1.0, dtype=np.float32)),
        "top_p": pa.array(np.full(n, 0.95, dtype=np.float32)),
        "sampling_seed": pa.array(rng.integers(0, 2**62, n)),
        "episode_id": pa.array([f"ep-{i:010d}" for i in ids.tolist()]),
    }
    schema = pa.schema(
        [("id", pa.int64()), *ROLLOUT_SCHEMA, *[(k, v.type) for k, v in extra.items()]]
    )
    return pa.table({"id": pa.array(ids), **values, **extra}, schema=schema)


def rollout_rows(rng: np.random.Generator, first: int, n: int) -> pa.Table:
    """Narrow RL rollouts: ``id``, 128-640 token ids and their log-probs, ``reward``."""
    tokens, logprobs = _tokens_and_logprobs(rng, rng.integers(128, 641, n))
    return pa.table(
        {
            "id": pa.array(np.arange(first, first + n, dtype=np.int64)),
            "output_tokens": tokens,
            "output_logprobs": logprobs,
            "reward": pa.array(rng.random(n, dtype=np.float32)),
        }
    )


def scalar_rows(rng: np.random.Generator, first: int, n: int) -> pa.Table:
    """Small rows: 8 fixed-width columns, 43 bytes."""
    ids = np.arange(first, first + n, dtype=np.int64)
    return pa.table(
        {
            "id": pa.array(ids),
            "user_id": pa.array(rng.integers(0, 10_000_000, n)),
            "ts": pa.array(1_700_000_000_000 + ids),
            "label": pa.array(rng.integers(0, 1000, n, dtype=np.int32)),
            "score": pa.array(rng.random(n, dtype=np.float32)),
            "weight": pa.array(rng.random(n)),
            "bucket": pa.array(rng.integers(0, 100, n, dtype=np.int16)),
            "flag": pa.array(rng.random(n) < 0.5),
        }
    )


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "lm",
            "pretokenized LM rows: id int64, tokens list<int32> of 512-2,048 (2-8 KB a row)",
            rows=24_576,
            row_group_rows=1024,
            files=4,
            batch=64,
            columns=("tokens",),
            generate=lm_rows,
        ),
        Workload(
            "rl",
            "RL rollouts: 31 columns (examples/rl_learner.py's schema, id, prompt and"
            " completion text of 1-4 KB, input tokens, reference logprobs, metadata);"
            " reads " + ", ".join(RL_COLUMNS),
            rows=12_288,
            row_group_rows=1024,
            files=4,
            batch=64,
            columns=tuple(RL_COLUMNS),
            generate=rl_rows,
        ),
        Workload(
            "scalar",
            "small scalar rows: 8 columns (int64 id, user_id, ts; int32 label; float32 score;"
            " float64 weight; int16 bucket; bool flag), 43 bytes a row",
            rows=524_288,
            row_group_rows=65_536,
            files=4,
            batch=1024,
            columns=("user_id", "ts", "label", "score", "weight", "bucket", "flag"),
            generate=scalar_rows,
        ),
        Workload(
            "rollout",
            "narrow RL rollouts: id int64, output_tokens list<int32> of 128-640, output_logprobs"
            " list<float32> of the same length, reward float32 (about 3 KB a row)",
            rows=163_840,
            row_group_rows=16_384,
            files=2,
            batch=64,
            columns=("output_tokens", "output_logprobs", "reward"),
            generate=rollout_rows,
            page_index=False,
            page_bytes=2**20,
        ),
    )
}


def row_bytes(table: pa.Table, columns: list[str]) -> np.ndarray:
    """Arrow bytes of each row's ``columns``: values, plus 4 offset bytes a list."""
    total = np.zeros(table.num_rows, dtype=np.int64)
    for name in columns:
        col = table.column(name).combine_chunks()
        if pa.types.is_list(col.type):
            width = col.type.value_type.byte_width
            total += col.value_lengths().to_numpy(zero_copy_only=False) * width + 4
        elif pa.types.is_boolean(col.type):
            total += 1  # delivered as a 1-byte bool tensor
        else:
            total += col.type.byte_width
    return total


@dataclass(frozen=True)
class Data:
    """A workload's table in the cache: Parquet files and what was measured of them."""

    workload: Workload
    folder: Path
    rows: int

    @property
    def parquet(self) -> Path:
        return self.folder / "parquet"

    @property
    def files(self) -> list[Path]:
        return sorted(self.parquet.glob("*.parquet"))

    @property
    def lancedb(self) -> Path:
        """A LanceDB database folder holding the table ``rows``."""
        return self.folder / "lancedb"

    @property
    def lance(self) -> Path:
        """The Lance dataset of table ``rows`` in :attr:`lancedb`."""
        return self.lancedb / "rows.lance"

    @property
    def mds(self) -> Path:
        return self.folder / "mds"

    @property
    def croupier(self) -> Path:
        """A croupier table holding the same rows in the same order."""
        return self.folder / "croupier"

    def croupier_layout(self, page_bytes: int | None, compression: str | None) -> Path:
        """The same croupier table written in pages of ``page_bytes`` compressed
        with ``compression`` (``None``: ``create_table``'s default)."""
        name = "croupier" + (f"-{page_bytes}" if page_bytes else "")
        return self.folder / (name + (f"-{compression}" if compression else ""))

    @property
    def meta(self) -> dict[str, float]:
        return json.loads((self.folder / "meta.json").read_text())

    def row_bytes(self) -> np.ndarray:
        return np.load(self.folder / "row_bytes.npy")


def prepare(workload: Workload, rows: int, cache: Path, seed: int = 1) -> Data:
    """Write the workload's Parquet files under ``cache`` unless they are there."""
    per_file = workload.files * workload.row_group_rows
    rows = max(per_file, rows // per_file * per_file)
    key = f"{workload.name}|{rows}|{workload.row_group_rows}|{workload.files}|{seed}"
    key += f"|{workload.page_index}|{workload.page_bytes}|{GENERATOR_VERSION}"
    folder = cache / f"{workload.name}-{rows}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"
    data = Data(workload, folder, rows)
    if (folder / "meta.json").exists():
        return data
    shutil.rmtree(folder, ignore_errors=True)
    data.parquet.mkdir(parents=True)
    groups = rows // workload.row_group_rows
    per_file_groups = groups // workload.files
    arrow_bytes = 0
    sizes = []
    writer: pq.ParquetWriter | None = None
    for g in range(groups):
        first = g * workload.row_group_rows
        t = workload.generate(np.random.default_rng([seed, g]), first, workload.row_group_rows)
        if g % per_file_groups == 0:
            if writer is not None:
                writer.close()
            path = data.parquet / f"part-{g // per_file_groups:05d}.parquet"
            writer = pq.ParquetWriter(
                path,
                t.schema,
                compression="zstd",
                write_page_index=workload.page_index,
                data_page_size=workload.page_bytes,
            )
        assert writer is not None
        writer.write_table(t, row_group_size=workload.row_group_rows)
        arrow_bytes += t.nbytes
        sizes.append(row_bytes(t, workload.read_columns()))
    if writer is not None:
        writer.close()
    np.save(folder / "row_bytes.npy", np.concatenate(sizes))
    meta = {
        "rows": rows,
        "columns": len(t.schema),
        "arrow_bytes": arrow_bytes,
        "parquet_bytes": sum(p.stat().st_size for p in data.files),
        "projected_bytes": int(np.concatenate(sizes).sum()),
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    return data


def _batches(data: Data) -> Iterator[pa.RecordBatch]:
    for path in data.files:
        yield from pq.ParquetFile(path).iter_batches(batch_size=data.workload.row_group_rows)


def to_lance(data: Data) -> Path:
    """Convert the table to a Lance dataset (default write settings) that is
    also table ``rows`` of a LanceDB database, once."""
    import lance

    done = data.lancedb / "_bench_done"
    if not done.exists():
        shutil.rmtree(data.lancedb, ignore_errors=True)
        schema = pq.read_schema(data.files[0])
        lance.write_dataset(pa.RecordBatchReader.from_batches(schema, _batches(data)), data.lance)
        done.touch()
    return data.lance


def to_croupier(data: Data, page_bytes: int | None = None, compression: str | None = None) -> str:
    """Write the rows into a croupier table (``create_table``'s defaults, or
    pages of ``page_bytes`` compressed with ``compression``), once; returns its
    URI."""
    folder = data.croupier_layout(page_bytes, compression)
    # The mark sits beside the table, which holds only its own files.
    done = folder.with_name(folder.name + ".done")
    if not done.exists():
        shutil.rmtree(folder, ignore_errors=True)
        write_croupier(data, "file://" + str(folder), page_bytes, compression)
        done.touch()
    return "file://" + str(folder)


def write_croupier(
    data: Data, uri: str, page_bytes: int | None = None, compression: str | None = None
) -> None:
    """Write the rows into a new croupier table at ``uri`` (``create_table``'s
    defaults, or pages of ``page_bytes`` compressed with ``compression``)."""
    import croupier as cr

    schema = pq.read_schema(data.files[0])
    reader = pa.RecordBatchReader.from_batches(schema, _batches(data))
    cr.create_table(uri, reader, page_bytes=page_bytes, compression=compression).close()


def _mds_encoding(type_: pa.DataType) -> str:
    """The MDS column encoding of an Arrow type of the workloads."""
    if pa.types.is_list(type_):
        return "ndarray:" + np.dtype(type_.value_type.to_pandas_dtype()).name
    if pa.types.is_string(type_):
        return "str"
    if pa.types.is_boolean(type_):
        return "uint8"
    return np.dtype(type_.to_pandas_dtype()).name


def to_mds(data: Data) -> Path:
    """Convert the table to MosaicML MDS shards (uncompressed, default shard size), once."""
    from streaming import MDSWriter

    done = data.mds / "_bench_done"
    if done.exists():
        return data.mds
    shutil.rmtree(data.mds, ignore_errors=True)
    schema = pq.read_schema(data.files[0])
    columns = {f.name: _mds_encoding(f.type) for f in schema}
    with MDSWriter(out=str(data.mds), columns=columns) as writer:
        for batch in _batches(data):
            cols = []
            for name in schema.names:
                arr = batch.column(name)
                if pa.types.is_list(arr.type):
                    offsets = arr.offsets.to_numpy()
                    values = arr.values.to_numpy()
                    cols.append([values[a:b] for a, b in itertools.pairwise(offsets)])
                elif pa.types.is_string(arr.type):
                    cols.append(arr.to_pylist())
                else:
                    cols.append(arr.to_numpy(zero_copy_only=False))
            for row in zip(*cols, strict=True):
                writer.write(dict(zip(schema.names, row, strict=True)))
    done.touch()
    return data.mds
