"""The stdio reader's line splitting (proxy/upstream/stdio_reader.py, proxy/upstream/overlong.py
``LineSplitter``, issue 23): whole reads cut into lines, the partial tail kept for the next
read, and backpressure: a reader paused in the middle of a read's lines hands over nothing
more, reads nothing more, holds a bounded amount while the server blocks, and loses
nothing once resumed."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import structlog

from proxy.config_upstream import UpstreamConfig
from proxy.core.jsonrpc import Message
from proxy.upstream import stdio_reader
from proxy.upstream.base import UpstreamContext
from proxy.upstream.overlong import LineSplitter, OverlongLine
from proxy.upstream.stdio import StdioUpstream
from tests.support import eventually
from tests.upstream.stdio_support import script_upstream

ASYNCIO_READ = 256 * 1024  # the most asyncio reads from a pipe at once

LIMIT = 16


def test_many_lines_in_one_read_come_at_once_in_order() -> None:
    splitter = LineSplitter(LIMIT, 4)
    data = b"".join(b"%d\n" % i for i in range(500))
    assert splitter.feed(data) == [b"%d" % i for i in range(500)]
    assert splitter.end() == []


def test_a_line_split_across_reads_comes_whole_once_its_newline_arrives() -> None:
    splitter = LineSplitter(LIMIT, 4)
    assert splitter.feed(b"a\nbc") == [b"a"]
    assert splitter.feed(b"d") == []
    assert splitter.feed(b"") == []
    assert splitter.feed(b"ef\ng") == [b"bcdef"]
    assert splitter.feed(b"\n") == [b"g"]


def test_a_line_of_exactly_the_limit_in_pieces_is_kept_one_more_byte_is_not() -> None:
    splitter = LineSplitter(LIMIT, 4)
    line = b"x" * LIMIT
    assert splitter.feed(line[:5]) == []
    assert splitter.feed(line[5:]) == []  # the limit reached, no newline yet: still whole
    assert splitter.feed(b"\n" + line[:7]) == [line]
    assert splitter.feed(line[7:] + b"y") == []  # one over: only its ends are kept now
    assert splitter.feed(b"\nok\n") == [OverlongLine(LIMIT + 1, b"xxxx", b"xxxy"), b"ok"]


def test_the_end_of_the_stream_inside_a_line_gives_that_line() -> None:
    splitter = LineSplitter(LIMIT, 4)
    assert splitter.feed(b"one\ntw") == [b"one"]
    assert splitter.feed(b"o") == []
    assert splitter.end() == [b"two"]
    assert splitter.end() == []  # given once


def test_a_huge_line_holds_at_most_the_limit_and_its_two_ends() -> None:
    limit, keep, piece = 1000, 64, 300
    splitter = LineSplitter(limit, keep)
    held = []
    for _ in range(1000):
        splitter.feed(b"z" * piece)
        held.append(splitter.held)
    assert max(held) <= limit + piece + 2 * keep
    assert splitter.feed(b"\n") == [OverlongLine(1000 * piece, b"z" * keep, b"z" * keep)]
    assert splitter.held == 0


# A server that writes 4,000 numbered lines of about 2 KB once asked, 10 in each write, and
# notes in a file how many it wrote after each write.
FLOOD = r"""
import os, sys
count = sys.argv[1]
sys.stdin.readline()
pad = b"p" * 2000
line = b'{"jsonrpc":"2.0","method":"n","params":{"i":%d,"pad":"%s"}}\n'
for i in range(0, 4000, 10):
    data = b"".join(line % (j, pad) for j in range(i, i + 10))
    while data:
        data = data[os.write(1, data):]
    with open(count, "w") as f:
        f.write(str(i + 10))
sys.stdin.readline()
"""
LINES = 4000
LINE_BYTES = 2050  # about


def blocked_in_write(pid: int) -> bool:
    """The process waits in write(2) (a full pipe)."""
    try:
        return Path(f"/proc/{pid}/syscall").read_text().split()[0] == "1"
    except (OSError, IndexError):
        return False


async def test_a_paused_reader_hands_over_nothing_holds_a_bound_and_loses_nothing(
    tmp_path: Path,
) -> None:
    script, count = tmp_path / "flood.py", tmp_path / "count"
    script.write_text(FLOOD)
    got: list[Message] = []
    limit = 4096

    def on_message(msg: Message, origin: int | None) -> None:
        got.append(msg)
        if len(got) == 1:
            up.pause()  # as the runtime does, in the middle of a read's lines

    async with script_upstream(script, on_message, str(count), max_line_bytes=limit) as up:
        up.send(b'{"jsonrpc":"2.0","method":"go"}')
        pid = up.pid
        assert pid is not None
        # The server blocks for good only once the reader paused (before that, a slow
        # first read can leave it blocked for a moment).
        await eventually(
            lambda: bool(got) and blocked_in_write(pid), timeout=30, what="the server blocked"
        )
        written = int(count.read_text() or 0)
        assert len(got) == 1  # paused at the first: not one more line handed over
        # What the proxy took and holds: at most one read and a partial line; plus the
        # pipe's own 64 KiB (and the write blocked).
        assert written * LINE_BYTES <= ASYNCIO_READ + limit + 64 * 1024 + 10 * LINE_BYTES
        assert written < LINES
        up.resume()
        await eventually(lambda: len(got) == LINES, timeout=30, what="every line read")
        assert [m.params["i"] for m in got] == list(range(LINES))


# Writes, once asked, one line of each kind in one write.
KINDS = r"""
import os, sys
sys.stdin.readline()
lines = [
    b'{"jsonrpc":"2.0","method":"one"}',
    b'[{"jsonrpc":"2.0","method":"b1"},{"jsonrpc":"2.0","method":"b2"}]',
    b'not json',
    b'42',
    b'{"no":"jsonrpc"}',
    b'  {"jsonrpc":"2.0","method":"crlf"}\r',
    b'',
    b'[{"jsonrpc":"2.0","method":"b3"},7]',
    b'{"jsonrpc":"2.0","method":"last"}',
]
os.write(1, b"\n".join(lines) + b"\n")
sys.stdin.readline()
"""


async def test_each_line_gives_its_message_or_batch_and_what_is_not_json_rpc_is_skipped(
    tmp_path: Path,
) -> None:
    script = tmp_path / "kinds.py"
    script.write_text(KINDS)
    got: list[Message] = []
    capture = structlog.testing.LogCapture()
    structlog.configure(processors=[capture])
    try:
        async with script_upstream(script, lambda m, origin: got.append(m)) as up:
            up.send(b'{"jsonrpc":"2.0","method":"go"}')
            await eventually(lambda: len(got) == 6, timeout=30, what="the messages")
        assert [m.method for m in got] == ["one", "b1", "b2", "crlf", "b3", "last"]
        assert got[0].wire == b'{"jsonrpc":"2.0","method":"one"}'  # passed on as it came
        assert got[1].wire is None  # a batch's messages are encoded again
        assert got[3].wire == b'{"jsonrpc":"2.0","method":"crlf"}'
        skipped = [e["line"] for e in capture.entries if e["event"] == "upstream_line_skipped"]
        assert skipped == [
            "not json",
            "42",
            '{"no":"jsonrpc"}',
            '[{"jsonrpc":"2.0","method":"b3"},7]',
        ]
    finally:
        structlog.reset_defaults()


# Writes, once asked, ten notifications, an over-long response to request 5, and three
# more notifications, all in one write.
TURN = r"""
import os, sys
sys.stdin.readline()
note = '{"jsonrpc":"2.0","method":"n%d"}'
big = '{"jsonrpc":"2.0","id":5,"result":{"x":"' + "a" * 10000 + '"}}'
lines = [note % i for i in range(10)] + [big] + [note % i for i in range(10, 13)]
os.write(1, ("\n".join(lines) + "\n").encode())
sys.stdin.readline()
"""


async def test_a_turns_messages_go_over_in_one_call_in_order_around_an_over_long_line(
    tmp_path: Path,
) -> None:
    script = tmp_path / "turn.py"
    script.write_text(TURN)
    got: list[Message] = []
    calls: list[int] = []  # the size of each on_messages call; 1: an on_message

    def on_messages(msgs: Sequence[Message]) -> None:
        calls.append(len(msgs))
        got.extend(msgs)

    def on_message(msg: Message, origin: int | None) -> None:
        calls.append(1)
        got.append(msg)

    up = StdioUpstream(
        UpstreamContext(
            UpstreamConfig(command=[sys.executable, str(script)], max_line_bytes=4096),
            "test-session-id",
            on_message=on_message,
            on_closed=lambda reason: None,
            on_messages=on_messages,
        )
    )
    await up.start()
    try:
        up.send(b'{"jsonrpc":"2.0","method":"go"}')
        await eventually(lambda: len(got) == 14, timeout=30, what="the messages")
        names = [m.method or f"answer {m.id}" for m in got]
        assert names == [f"n{i}" for i in range(10)] + ["answer 5"] + [
            f"n{i}" for i in range(10, 13)
        ]
        assert got[10].is_error
        assert max(calls) > 1  # a turn's messages in one call
        assert max(calls) <= stdio_reader.LINES_PER_TURN
    finally:
        await up.stop()
