"""One rank of a distributed permutation build, for test_distributed_build.py.

Run as ``python distributed_rank.py '<json>'`` with ``{"store", "rank", "world",
"table", "builds"}``: it joins a gloo process group through the file ``store``
and, for each ``{"uri", "calls"}`` of ``builds`` in turn, builds the permutation
of ``table`` that ``calls`` describe (a list of ``[method, args, kwargs]`` of
PermutationBuilder) at ``uri`` with ``persist(group=...)``. Its last line is the
JSON list of each build's ``{"id", "rows"}`` or ``{"error", "type"}``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch.distributed as dist

import croupier as cr


def main() -> None:
    job = json.loads(sys.argv[1])
    dist.init_process_group(
        "gloo", init_method="file://" + job["store"], rank=job["rank"], world_size=job["world"]
    )
    try:
        table = cr.open_table(job["table"])
        replies = [build(table, b["uri"], b["calls"]) for b in job["builds"]]
        print(json.dumps(replies))
    finally:
        dist.destroy_process_group()


def build(table: cr.Table, at: str, calls: list[list[Any]]) -> dict[str, Any]:
    builder = cr.PermutationBuilder(table)
    for name, args, kwargs in calls:
        builder = getattr(builder, name)(*args, **kwargs)
    try:
        perms = builder.persist(at, progress=False, group=dist.group.WORLD)
    except cr.CroupierError as exc:
        return {"error": str(exc), "type": type(exc).__name__}
    return {"id": perms.id, "rows": [len(s) for s in perms]}


if __name__ == "__main__":
    main()
