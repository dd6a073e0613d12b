"""The stdio upstream against real child processes: framing, stderr, stopping a group."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
import structlog

from proxy.config_upstream import UpstreamConfig
from proxy.core.errors import UpstreamStartFailed
from proxy.core.jsonrpc import Message
from proxy.upstream.base import UpstreamContext
from proxy.upstream.stdio import StdioUpstream
from tests.support import alive, eventually

# A tiny server: echoes each request as a result, spawns a grandchild that ignores SIGTERM
# and stdin, and (when asked) ignores SIGTERM itself.
SERVER = r"""
import json, os, signal, subprocess, sys
if "--stubborn" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
print(f"grandchild {child.pid}", file=sys.stderr, flush=True)
for line in sys.stdin:
    m = json.loads(line)
    reply = {"jsonrpc": "2.0", "id": m["id"], "result": {"echo": m["method"]}}
    print(json.dumps(reply), flush=True)
if "--stubborn" in sys.argv:
    import time; time.sleep(300)
"""


async def wait_dead(pid: int, timeout: float = 10.0) -> bool:
    """SIGKILL is delivered asynchronously: wait for the process to be gone (or a zombie)."""
    try:
        await eventually(lambda: not alive(pid), timeout=timeout, what=f"process {pid} to end")
    except AssertionError:
        return False
    return True


async def start(tmp_path: Path, *args: str, grace: float = 2.0):  # type: ignore[no-untyped-def]
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    got: asyncio.Queue[Message] = asyncio.Queue()
    closed: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    up = StdioUpstream(
        UpstreamContext(
            UpstreamConfig(command=[sys.executable, str(script), *args], stop_grace_seconds=grace),
            "test-session-id",
            on_message=lambda m, origin: got.put_nowait(m),
            on_closed=lambda reason: closed.done() or closed.set_result(reason),
        )
    )
    await up.start()
    return up, got, closed


async def grandchild_pid(log: structlog.testing.LogCapture) -> int:
    def said() -> int | None:
        for entry in log.entries:
            if entry["event"] == "upstream_stderr" and entry["line"].startswith("grandchild"):
                return int(entry["line"].split()[1])
        return None

    pid: int = await eventually(said, timeout=10.0, what="the server to say its grandchild's pid")
    return pid


@pytest.fixture
def log() -> structlog.testing.LogCapture:
    capture = structlog.testing.LogCapture()
    structlog.configure(processors=[capture])
    yield capture
    structlog.reset_defaults()


async def test_messages_stderr_and_group_stop(
    tmp_path: Path, log: structlog.testing.LogCapture
) -> None:
    up, got, closed = await start(tmp_path)
    up.send(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    msg = await asyncio.wait_for(got.get(), 30)
    assert msg.raw == {"jsonrpc": "2.0", "id": 1, "result": {"echo": "ping"}}
    grandchild = await grandchild_pid(log)
    stderr = [e for e in log.entries if e["event"] == "upstream_stderr"]
    assert stderr[0]["session"] == "test-ses", "stderr lines carry the session (a prefix)"
    assert alive(grandchild)
    await asyncio.wait_for(up.stop(), 20)
    assert await wait_dead(up.pid or 0) and await wait_dead(grandchild), "the group is stopped"
    assert await asyncio.wait_for(closed, 10)


async def test_a_server_ignoring_sigterm_is_killed_after_the_grace(
    tmp_path: Path, log: structlog.testing.LogCapture
) -> None:
    up, _, _ = await start(tmp_path, "--stubborn", grace=0.5)
    grandchild = await grandchild_pid(log)
    await asyncio.wait_for(up.stop(), 20)
    assert await wait_dead(up.pid or 0) and await wait_dead(grandchild)
    assert any(e["event"] == "upstream_kill" for e in log.entries)


async def test_a_missing_command_is_a_clear_error() -> None:
    up = StdioUpstream(
        UpstreamContext(
            UpstreamConfig(command=["/nonexistent/mcp-server"]),
            "s",
            on_message=lambda m, origin: None,
            on_closed=lambda r: None,
        )
    )
    with pytest.raises(UpstreamStartFailed) as info:
        await up.start()
    assert info.value.http_status == 502 and "/nonexistent/mcp-server" in info.value.message
    await up.stop()  # nothing started: a no-op


async def test_the_exit_of_the_server_is_reported(tmp_path: Path) -> None:
    script = tmp_path / "quit.py"
    script.write_text("import sys; sys.exit(7)")
    closed: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    up = StdioUpstream(
        UpstreamContext(
            UpstreamConfig(command=[sys.executable, str(script)]),
            "s",
            on_message=lambda m, origin: None,
            on_closed=closed.set_result,
        )
    )
    await up.start()
    assert await asyncio.wait_for(closed, 30) == "exited with code 7"
    await up.stop()
    assert os.path.exists("/proc") and not alive(up.pid or 0)


async def test_a_crash_is_noticed_even_while_a_grandchild_holds_the_pipes(
    tmp_path: Path, log: structlog.testing.LogCapture
) -> None:
    up, got, closed = await start(tmp_path)
    grandchild = await grandchild_pid(log)
    up.send(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    await asyncio.wait_for(got.get(), 30)
    os.kill(up.pid or 0, 9)  # the server dies; its grandchild keeps stdout open
    assert (await asyncio.wait_for(closed, 10)) == "exited with code -9"
    assert await wait_dead(grandchild), "a crashed server's children are stopped too"
    await asyncio.wait_for(up.stop(), 20)
