"""The stdio reader's work per loop turn (proxy/upstream/stdio.py, issue 23): a pipe full
of lines is read in slices of at most ``_LINES_PER_TURN`` messages, with a turn of the
event loop between them, so a burst's reader never holds the loop for long and other
sessions' calls, the store's commits and the writers get on in between."""

from __future__ import annotations

import asyncio
from pathlib import Path

from proxy.core.jsonrpc import Message
from proxy.upstream import stdio_reader
from tests.support import eventually
from tests.upstream.stdio_support import script_upstream

LINES = 2000

# Writes LINES notifications in one write once asked (a line on stdin), then waits.
FLOOD = r"""
import sys
sys.stdin.readline()
line = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"n":1}}\n'
sys.stdout.buffer.write(line * LINES)
sys.stdout.buffer.flush()
sys.stdin.readline()
""".replace("LINES", str(LINES))


async def test_a_pipe_full_of_lines_is_read_a_bounded_slice_per_loop_turn(tmp_path: Path) -> None:
    assert stdio_reader.LINES_PER_TURN <= 64
    script = tmp_path / "flood.py"
    script.write_text(FLOOD)
    got: list[Message] = []
    loop = asyncio.get_running_loop()
    per_turn: list[int] = []  # messages handed over between two turns of the loop
    seen = [0]

    def tick() -> None:
        per_turn.append(len(got) - seen[0])
        seen[0] = len(got)
        if len(got) < LINES:
            loop.call_soon(tick)

    async with script_upstream(script, lambda m, origin: got.append(m)) as up:
        up.send(b'{"jsonrpc":"2.0","method":"go"}\n')
        loop.call_soon(tick)
        # Counted by the ticks, not len(got): the last lines may be handed over in the
        # turn this task wakes in, after that turn's tick.
        await eventually(lambda: seen[0] == LINES, timeout=30, what="every line counted")
        assert max(per_turn) <= stdio_reader.LINES_PER_TURN
        assert sum(per_turn) == len(got) == LINES
