"""The upstream alone: how fast each fixture writes a burst to a pipe, with no HTTP and no proxy.

The runner measures this once per repetition (median of 3) and prints it next to the burst
phase: a proxy cannot relay faster than its upstream writes, so this is the ceiling the
burst target is judged against (``bench/README.md``, "Upstream alone").
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import contenders as C
from contenders import ROOT

EMIT_SDK = "legacy_server.py"
EMIT_RAW = "flood_server.py"


def stdio_emission(server: list[str], tool: str, n: int, size: int = 200) -> float:
    """Notifications/s the upstream alone writes to a pipe (no HTTP, no proxy): its ceiling.

    The reader spins on a non-blocking pipe and never sleeps. A reader that blocks lets
    the CPUs go idle between lines, and the SDK server, which hands every line to a worker
    thread and back (``anyio.wrap_file``: ``write``, then ``flush``), then pays a wake-up
    from idle per hand-off: on this machine it writes ~3,200/s to a blocking reader and
    ~8,900/s while anything else keeps a CPU busy (as a proxy relaying it does).
    """
    proc = subprocess.Popen(
        server, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:

        def send(msg: dict[str, Any]) -> None:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(msg).encode() + b"\n")
            proc.stdin.flush()

        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "b"}}
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
        proc.stdout.readline()
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        fd = proc.stdout.fileno()
        os.set_blocking(fd, False)
        call = {"name": tool, "arguments": {"n": n, "size": size}, "_meta": {"progressToken": 1}}
        t0 = time.perf_counter()
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call})
        seen, tail, done = 0, b"", False
        deadline = time.monotonic() + 120
        while not done and time.monotonic() < deadline:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                break
            *lines, tail = (tail + chunk).split(b"\n")
            for line in lines:
                if b"notifications/progress" in line:
                    seen += 1
                elif b'"id":2' in line.replace(b" ", b""):
                    done = True
        wall = time.perf_counter() - t0
        if seen != n or not done:
            raise RuntimeError(f"stdio emission of {server[-1]}: {seen} of {n} notifications")
        return seen / wall
    finally:
        proc.stdin.close()
        C.stop(proc)
