"""The official TypeScript SDK client (``@modelcontextprotocol/sdk``, Node 22) through the proxy.

``ts/reconnecting_client.mjs`` connects a ``Client`` over ``StreamableHTTPClientTransport`` to
the proxy in front of ``tests/fixtures/legacy_server.py`` and calls ``slow`` (one
``notifications/progress`` per step); it prints every progress value and the result as JSON
lines. The call's stream is broken before the response, and the SDK's own automatic
reconnection (``reconnectionOptions``: ``GET`` + ``Last-Event-ID``, 2025-11-25 transports,
"Resumability and Redelivery") must deliver the rest exactly once, in order:

- by the network: a TCP forwarder (tests/cut_proxy.py) between client and proxy, after
  seeded progress values, either closes the call's connection at a seeded byte of the next
  event (so mid-event) or resets every connection at once (seeded);
- by the server: ``sse.max_stream_seconds`` makes the proxy close the call's stream on
  purpose after ``retry:`` (SEP-1699 polling), again and again during the call.

The cuts fall only on a response that has already delivered an event id: the TS SDK
(1.32.2) starts each resumed ``GET`` with no position of its own, so one dropped before its
first event reconnects without ``Last-Event-ID`` and the call never completes — a client
limitation no server can repair.

Replay a run with the seed it printed: ``pytest --seed <seed>`` (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.cut_proxy import CutProxy
from tests.support import FIXTURE, run_proxy

from .node_tools import group_gone, node_binary, node_modules, stop_group

SCRIPT = Path(__file__).with_name("ts") / "reconnecting_client.mjs"
CLIENT_DEADLINE_S = 60.0

Line = dict[str, Any]
EVENT_BYTES = 130  # a progress event of `slow` on the wire is a little longer


@dataclass
class ClientRun:
    lines: list[Line]
    stderr: str
    returncode: int

    def sequence(self) -> list[Line]:
        """The progress notifications and the result, as the client's callbacks saw them."""
        return [line for line in self.lines if "progress" in line or "result" in line]

    def http(self) -> list[Line]:
        return [line["http"] for line in self.lines if "http" in line]

    def describe(self) -> str:
        return "\n".join(json.dumps(line) for line in self.lines) + f"\nstderr:\n{self.stderr}"


async def run_ts_client(
    url: str, tool: str, args: dict[str, Any], workdir: Path, on_line: Callable[[Line], None]
) -> ClientRun:
    """Run the TS client script to completion (its own process group, always stopped)."""
    stderr_path = workdir / "ts-client.stderr"
    with stderr_path.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            str(node_binary()),
            str(SCRIPT),
            url,
            tool,
            json.dumps(args),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, "MCP_TOOLS_NODE_MODULES": str(node_modules())},
            start_new_session=True,
        )
    lines: list[Line] = []
    try:
        async with asyncio.timeout(CLIENT_DEADLINE_S):
            assert process.stdout is not None
            async for raw in process.stdout:
                line = json.loads(raw)
                lines.append(line)
                on_line(line)
            await process.wait()
    except TimeoutError:
        stuck = ClientRun(lines, stderr_path.read_text(errors="replace"), -1)
        raise AssertionError(
            f"the TS client did not finish in {CLIENT_DEADLINE_S}s:\n{stuck.describe()}"
        ) from None
    finally:
        await stop_group(process)
        await group_gone(process.pid, "the node client's processes")
    assert process.returncode is not None
    return ClientRun(lines, stderr_path.read_text(errors="replace"), process.returncode)


def assert_exact_run(run: ClientRun, steps: int, min_resumes: int) -> None:
    """Every progress once, in order, then the result; one POST of the call; GET resumes."""
    expected: list[Line] = [{"progress": i, "total": steps} for i in range(1, steps + 1)]
    expected.append({"result": f"done {steps}"})
    assert run.returncode == 0, run.describe()
    assert run.sequence() == expected, run.describe()
    assert run.lines[-1] == {"closed": True}, run.describe()
    calls = [x for x in run.http() if x["method"] == "POST" and x["rpc"] == "tools/call"]
    assert len(calls) == 1, f"the call was sent {len(calls)} times:\n{run.describe()}"
    resumes = [x for x in run.http() if x["method"] == "GET" and x["lastEventId"]]
    assert len(resumes) >= min_resumes, f"{len(resumes)} resumes:\n{run.describe()}"
    assert all(x["status"] == 200 for x in resumes), run.describe()


async def test_ts_sdk_reconnects_after_tcp_cuts_mid_call(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    steps = 24
    # Cut once the client has this much progress, 4 apart: a resume may bring several at once.
    cut_at = [first + 4 * i for i, first in enumerate(sorted(rng.sample(range(1, 9), 3)))]
    how = [rng.choice(("mid-event close", "reset all")) for _ in cut_at]
    print(f"cut after progress {cut_at}: {how}")
    pending = list(zip(cut_at, how, strict=True))
    # retry_ms: the SDK waits what the server's retry: says before it reconnects.
    async with run_proxy(tmp_path, command=FIXTURE, sse={"retry_ms": 100}) as proxy:
        forwarder = CutProxy(proxy.port)
        await forwarder.start()
        try:

            def on_line(line: Line) -> None:
                progress = line.get("progress")
                if pending and isinstance(progress, int) and progress >= pending[0][0]:
                    if pending.pop(0)[1] == "reset all":
                        forwarder.cut_all(reset=True)  # the call's and the standalone stream
                    else:  # a plain close inside the next event of the call's stream
                        forwarder.schedule_cuts([rng.randrange(EVENT_BYTES)])

            args = {"steps": steps, "delay": 0.1}
            run = await run_ts_client(forwarder.url(), "slow", args, tmp_path, on_line)
            assert not pending and forwarder.cuts_pending == 0, "cuts left:\n" + run.describe()
        finally:
            await forwarder.stop()
        assert_exact_run(run, steps, min_resumes=len(cut_at))


async def test_ts_sdk_reconnects_when_the_proxy_closes_the_stream(tmp_path: Path) -> None:
    steps = 15
    sse = {"max_stream_seconds": 0.4, "retry_ms": 100}
    async with run_proxy(tmp_path, command=FIXTURE, sse=sse) as proxy:
        run = await run_ts_client(
            proxy.url, "slow", {"steps": steps, "delay": 0.1}, tmp_path, lambda line: None
        )
    assert_exact_run(run, steps, min_resumes=2)


WS_SCRIPT = Path(__file__).with_name("ts") / "websocket_client.mjs"


async def test_the_ts_sdk_websocket_client_works_against_ws(tmp_path: Path) -> None:
    """The TS SDK's own ``WebSocketClientTransport`` against ``/ws``: a session is created
    by its ``initialize``, tools are listed and called, progress arrives in order."""
    steps = 6
    async with run_proxy(tmp_path, command=FIXTURE) as proxy:
        ws_url = proxy.base.replace("http://", "ws://") + "/ws"
        process = await asyncio.create_subprocess_exec(
            str(node_binary()),
            str(WS_SCRIPT),
            ws_url,
            str(steps),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "MCP_TOOLS_NODE_MODULES": str(node_modules())},
            start_new_session=True,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), CLIENT_DEADLINE_S)
        finally:
            await stop_group(process)
        await group_gone(process.pid, "the node client's processes")
    lines = [json.loads(line) for line in out.decode().splitlines() if line.strip()]
    assert process.returncode == 0, f"{lines}\n{err.decode()}"
    assert {"echo", "slow"} <= set(lines[0]["tools"])
    assert lines[1] == {"echo": "over ws"}
    # The proxy writes every progress frame before the result (the raw-frame tests in
    # tests/downstream/test_websocket.py check that). The TS SDK (1.32) runs notification
    # handlers a microtask late but responses at once, and Node delivers frames that share
    # a TCP read in one go: the last progress, written just before the result, can reach a
    # handler the result already removed. So: in order, none repeated, at most the last one
    # lost on the client's side.
    seen = [line["progress"] for line in lines if "progress" in line]
    assert seen == list(range(1, len(seen) + 1)) and len(seen) >= steps - 1, seen
    assert lines[-2:] == [{"result": f"done {steps}"}, {"closed": True}]
