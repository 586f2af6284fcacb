"""Ctrl-C cancels a call into Go that waits on a stalled store.

A child process opens a table, builds a permutation or reads a batch over S3
from the local S3-compatible server (``internal/s3serve``, over
``internal/s3test``), which then delays every answer by ten minutes. Once the
server has received the call's request (so the child is inside Go), the test
sends SIGINT: the child must get KeyboardInterrupt within 20 s, a generous bound
against a stall of minutes, and, once it has closed what it opened, hold no
more Arrow memory, goroutines or file descriptors than before it opened them.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import write_files

pytestmark = pytest.mark.slow  # builds and starts the S3 server

REPO = Path(__file__).resolve().parents[2]
STALL_MS = 10 * 60 * 1000  # every answer of the stalled server waits this long
WITHIN = 20.0  # seconds from SIGINT to KeyboardInterrupt

# The child: makes ready, waits for a line on stdin, then runs the call and
# reports how it ended, then whether what the Go core holds came back.
CHILD = textwrap.dedent(
    """
    import json, sys, time
    import croupier as cr
    from test_leak import settle, usage

    op, table_uri, perm_uri = sys.argv[1:4]
    cr.open_table(table_uri).close()  # what the library keeps once it has read a table
    before = usage()
    tbl = None if op == "open" else cr.open_table(table_uri)
    ds = None
    if op == "read":
        ds = cr.StreamingDataset(tbl, global_batch_size=8, num_splits=8, format="numpy")
        ds._handle()  # the dataset is open; the stream is what the call opens
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        if op == "open":
            cr.open_table(table_uri)
        elif op == "build":
            cr.PermutationBuilder(tbl).filter("id >= 0").persist(perm_uri, progress=False)
        else:
            next(iter(ds))
        ended = "returned"
    except KeyboardInterrupt:
        ended = "KeyboardInterrupt"
    print(ended, flush=True)
    if ds is not None:
        ds.close()
    if tbl is not None:
        tbl.close()  # and with it the connections its client keeps idle
    after = settle(before)
    print(json.dumps({"before": before, "after": after}), flush=True)
    """
)


class S3Server:
    """internal/s3serve serving one table; the control URL sets its delay."""

    def __init__(self, binary: Path, folder: Path) -> None:
        self.proc = subprocess.Popen(
            [str(binary), f"table={folder}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        info = json.loads(self.proc.stdout.readline())
        self.control, self.table_uri = info["control"], info["uris"]["table"]

    def requests(self) -> int:
        with urllib.request.urlopen(self.control + "/stats", timeout=30) as r:
            return int(json.load(r)["requests"])

    def delay(self, ms: int) -> None:
        req = urllib.request.Request(f"{self.control}/delay?ms={ms}", method="POST")
        urllib.request.urlopen(req, timeout=30).close()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # s3serve exits when its standard input closes
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    go = shutil.which("go")
    if go is None:
        pytest.skip("needs the Go toolchain")
    folder = tmp_path_factory.mktemp("s3")
    binary = folder / "s3serve"
    subprocess.run([go, "build", "-o", str(binary), "./internal/s3serve"], cwd=REPO, check=True,
                   timeout=600, capture_output=True)  # fmt: skip
    write_files(folder / "table", [300, 300])
    srv = S3Server(binary, folder / "table")
    yield srv
    srv.close()


def start_child(op: str, server: S3Server, perm: str) -> subprocess.Popen[str]:
    tests = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, op, server.table_uri, perm],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


@pytest.mark.parametrize("op", ["open", "build", "read"])
def test_ctrl_c_cancels_a_call_on_a_stalled_store(
    server: S3Server, tmp_path: Path, op: str
) -> None:
    server.delay(0)
    child = start_child(op, server, "file://" + str(tmp_path / "perm"))
    try:
        assert child.stdin is not None
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        server.delay(STALL_MS)
        seen = server.requests()
        child.stdin.write("go\n")
        child.stdin.flush()
        deadline = time.monotonic() + 60
        while server.requests() == seen:  # the call's first request is stalled: it is in Go
            assert time.monotonic() < deadline, "the call sent no request"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGINT)
        sent = time.monotonic()
        answered, _, _ = select.select([child.stdout], [], [], 3 * WITHIN)
        assert answered, f"no answer {3 * WITHIN:g} s after SIGINT"
        took = time.monotonic() - sent
        server.delay(0)
        assert child.stdout.readline() == "KeyboardInterrupt\n"
        assert took < WITHIN, f"KeyboardInterrupt came {took:.1f} s after SIGINT"
        report: dict[str, Any] = json.loads(child.stdout.readline())
        # Measured with nothing open, before the call and after it once the child
        # has closed what it opened: a canceled request's connection may still be
        # dialed and kept idle by the store's client, which the table's close ends.
        (bytes_before, goroutines_before, fds_before) = report["before"]
        (bytes_after, goroutines_after, fds_after) = report["after"]
        assert bytes_after == bytes_before
        assert goroutines_after <= goroutines_before, report
        assert fds_after <= fds_before, report
        assert child.wait(60) == 0
    finally:
        server.delay(0)
        if child.poll() is None:
            child.kill()
            child.wait()
