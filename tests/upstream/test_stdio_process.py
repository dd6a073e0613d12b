"""The stdio server's process and its pipes (proxy/upstream/stdio_process.py, issue 23): its
stdout is read by a pipe transport of our own, so an answer is handed over in the loop
turn that reads it (asyncio's subprocess transport hands each read over a turn later);
every pipe opened for a process is closed once it is stopped, or once it failed to start."""

from __future__ import annotations

import asyncio
import os
import selectors
import sys
from pathlib import Path

import pytest

from proxy.config_upstream import UpstreamConfig
from proxy.core.errors import UpstreamStartFailed
from proxy.core.jsonrpc import Message
from proxy.upstream.base import UpstreamContext
from proxy.upstream.stdio import StdioUpstream
from tests.support import eventually

# Answers each line on stdin with one response line; writes nothing else.
ECHO = r"""
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": {}}), flush=True)
"""


class _TurnCounter(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The event loop's selector, counting its turns (one ``select`` each) and noting
    those in which some file descriptor was readable."""

    def __init__(self) -> None:
        super().__init__()
        self.turn = 0
        self.readable: set[int] = set()
        self.handed: list[int] = []  # the turns messages were handed over in

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(timeout)
        self.turn += 1
        if any(mask & selectors.EVENT_READ for _, mask in events):
            self.readable.add(self.turn)
        return events


def _upstream(
    script: Path, got: list[Message], selector: _TurnCounter | None = None
) -> StdioUpstream:
    """``script`` as the server, its messages in ``got``; with ``selector``, each one's turn
    appended to ``selector.handed``."""

    def on_message(msg: Message, origin: int | None) -> None:
        got.append(msg)
        if selector is not None:
            selector.handed.append(selector.turn)

    return StdioUpstream(
        UpstreamContext(
            UpstreamConfig(command=[sys.executable, str(script)]),
            "test-session-id",
            on_message=on_message,
            on_closed=lambda reason: None,
        )
    )


def test_an_answer_is_handed_over_in_the_turn_that_reads_it(tmp_path: Path) -> None:
    script = tmp_path / "echo.py"
    script.write_text(ECHO)
    selector = _TurnCounter()
    got: list[Message] = []

    async def calls() -> None:
        up = _upstream(script, got, selector)
        await up.start()
        try:
            for n in range(1, 6):
                up.send(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}' % n)
                await eventually(lambda: len(got) == n, what=f"answer {n}")  # noqa: B023
        finally:
            await up.stop()

    loop = asyncio.SelectorEventLoop(selector)
    try:
        loop.run_until_complete(calls())
    finally:
        loop.close()
    assert [m.id for m in got] == [1, 2, 3, 4, 5]
    # The server writes nothing but its answers: a turn that hands one over without any
    # readable descriptor is a turn after the one that read it.
    handed, readable = selector.handed, sorted(selector.readable)
    assert all(turn in selector.readable for turn in handed), (handed, readable)


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc (Linux)")
async def test_every_pipe_of_a_stopped_process_is_closed(tmp_path: Path) -> None:
    script = tmp_path / "echo.py"
    script.write_text(ECHO)
    got: list[Message] = []
    up = _upstream(script, got)
    await up.start()
    await up.stop()  # (anything opened once per process, lazily, is open now)
    before = _open_fds()
    up = _upstream(script, got)
    await up.start()
    up.send(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    await eventually(lambda: len(got) == 1, what="the answer")
    assert len(_open_fds() - before) >= 3, "stdin, stdout, stderr"
    await up.stop()
    await eventually(lambda: _open_fds() <= before, what="every pipe closed")


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc (Linux)")
async def test_a_command_that_cannot_run_leaves_no_pipe_open(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-server"
    up = StdioUpstream(
        UpstreamContext(
            UpstreamConfig(command=[str(missing)]),
            "test-session-id",
            on_message=lambda m, origin: None,
            on_closed=lambda reason: None,
        )
    )
    before = _open_fds()
    with pytest.raises(UpstreamStartFailed, match="cannot start MCP server"):
        await up.start()
    await eventually(lambda: _open_fds() <= before, what="the stdout pipe closed")
