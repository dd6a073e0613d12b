"""The core's own instructions per legacy call, counted by callgrind (issue 23, fifth pass).

``.venv/bin/python bench/core_call.py SRC [CALLS]``: SRC is a directory holding a
``proxy/`` (the tree, or ``git archive COMMIT proxy | tar -x -C DIR``). One core
:class:`~proxy.core.session.Session` (no runtime, no I/O) is initialized, then fed a
call's three events CALLS times (default 600: under ``max_streams_per_session``, so no
call evicts): the ``ClientPost`` of a ``tools/call``, its answer (``UpstreamMessage``) and
the connection gone (``ClientDetached``). The events are built before counting starts
and the garbage collector is off while it runs, so the count is ``Session.handle``'s
alone. Runs itself under ``valgrind --tool=callgrind --instr-atstart=no``.
"""

from __future__ import annotations

import gc
import glob
import json
import os
import subprocess
import sys
import tempfile
from typing import Any


def child(src: str, calls: int) -> None:
    sys.path.insert(0, src)
    from proxy.core import jsonrpc
    from proxy.core.events import (
        ClientDetached,
        ClientPost,
        ConnId,
        Event,
        SendUpstream,
        UpstreamMessage,
    )
    from proxy.core.session import Session, SessionSettings

    session = Session("sid", "ep0ch", SessionSettings(), 1000.0)
    now = 1000.0

    def post(conn: int, obj: dict[str, Any]) -> Any:
        return session.handle(ClientPost(ConnId(conn), [jsonrpc.classify(obj)]), now)

    params = {"protocolVersion": "2025-11-25", "capabilities": {}}
    out = post(1, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
    sent = next(json.loads(c.payload) for c in out if isinstance(c, SendUpstream))
    answer = {"jsonrpc": "2.0", "id": sent["id"], "result": params}
    session.handle(UpstreamMessage(jsonrpc.classify(answer)), now)
    session.handle(ClientDetached(ConnId(1)), now)
    post(2, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    session.handle(ClientDetached(ConnId(2)), now)
    upstream_id = sent["id"]

    def build(n: int) -> list[tuple[Event, Event, Event]]:
        nonlocal upstream_id
        events: list[tuple[Event, Event, Event]] = []
        for i in range(n):
            upstream_id += 1
            conn = ConnId(10 + upstream_id)
            args = {"name": "echo", "arguments": {"text": f"c{i}"}}
            call = {"jsonrpc": "2.0", "id": i + 5, "method": "tools/call", "params": args}
            result = {"content": [{"type": "text", "text": f"c{i}"}]}
            done = {"jsonrpc": "2.0", "id": upstream_id, "result": result}
            events.append(
                (
                    ClientPost(conn, [jsonrpc.classify(call)]),
                    UpstreamMessage(jsonrpc.classify(done)),
                    ClientDetached(conn),
                )
            )
        return events

    def run(events: list[tuple[Event, Event, Event]]) -> None:
        nonlocal now
        handle = session.handle
        for a, b, c in events:
            now += 0.001
            handle(a, now)
            handle(b, now)
            handle(c, now)

    run(build(30))  # warm
    events = build(calls)
    gc.collect()
    gc.disable()
    pid = str(os.getpid())
    subprocess.run(["callgrind_control", "-i", "on", pid], capture_output=True)
    run(events)
    subprocess.run(["callgrind_control", "-i", "off", pid], capture_output=True)


def main() -> None:
    src, calls = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 600
    with tempfile.TemporaryDirectory(prefix="bench-core-") as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--child",
                src,
                str(calls),
            ],
            env={**os.environ, "PYTHONHASHSEED": "0"},
            capture_output=True,
            check=True,
        )
        total = 0
        for path in glob.glob(out + "*"):
            with open(path) as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("totals:"))
    print(src, round(total / calls), "Ir per call (Session.handle alone)")


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]))
    else:
        main()
