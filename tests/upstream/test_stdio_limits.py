"""Stdout lines over ``upstream.max_line_bytes`` from a stdio MCP server.

End to end (the real proxy, a real fixture server, a raw HTTP client): exactly the
over-long line is skipped, an over-long *response* is answered with an error naming the
limit, an over-long server request is refused to the server (never answered to the client
with a fake response), and an over-long notification is skipped.
Then the parts on their own: ``LineSplitter`` under every chunking, and ``outline``, which
reads the id of a response from the two ends of its line.
"""

from __future__ import annotations

import asyncio
import json
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from proxy.upstream.overlong import LineSplitter, Outline, OverlongLine, outline
from tests.downstream.sse_client import RawSession, messages, proxy_session
from tests.support import RunningProxy, eventually, log_events

# Small enough that an over-long line and the answer written right after it fit in one
# pipe buffer (64 KiB on Linux): the proxy then sees the newline of the over-long line
# already in its buffer, the case that used to eat the next message.
LIMIT = 16 * 1024
WAIT = 30.0  # generous: a lost answer shows as a timeout, never as a hang

# Answers initialize and ping; a tools/call's name says which misbehaviour to perform.
# Each case is written with one os.write so that its lines arrive together.
SERVER = r"""
import json, os, sys

LIMIT = int(sys.argv[1])
BIG = "x" * (16 * LIMIT)  # far over the limit and over the proxy's 64 KiB head and tail


def out(*lines):
    data = "".join(line + "\n" for line in lines).encode()
    while data:
        data = data[os.write(1, data):]


def answer(rid, text):
    return json.dumps({"jsonrpc": "2.0", "id": rid,
                       "result": {"content": [{"type": "text", "text": text}]}})


for line in sys.stdin:
    m = json.loads(line)
    rid, method = m.get("id"), m.get("method")
    if rid is not None and method is None and "error" in m:  # answers to our requests
        reason = (m["error"].get("data") or {}).get("reason")
        print("server request", rid, "answered with error:", reason, file=sys.stderr, flush=True)
    if rid is None or method is None:
        continue
    if method == "initialize":
        out(json.dumps({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": m["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "long-lines", "version": "1"}}}))
        continue
    if method != "tools/call":
        out(json.dumps({"jsonrpc": "2.0", "id": rid, "result": {}}))
        continue
    case = m["params"]["name"]
    if case == "just_over_then_answer":
        out("#" * (LIMIT + 1), answer(rid, "after"))
    elif case == "several_then_answer":
        out("#" * (LIMIT + 1), "#" * (3 * LIMIT), "[" * (LIMIT + 7), answer(rid, "after"))
    elif case == "id_first":  # the Python SDK's order; an "id" nested in the result
        out(json.dumps({"jsonrpc": "2.0", "id": rid, "result": {
            "content": [{"type": "text", "id": 7, "text": BIG}]}}))
    elif case == "id_last":  # the TypeScript SDK's order
        out(json.dumps({"result": {"content": [{"id": 7, "type": "text", "text": BIG}],
                                   "isError": False},
                        "jsonrpc": "2.0", "id": rid}))
    elif case == "long_request":
        # A server request reusing the id of the call in flight (ids are per direction):
        # a synthesized "response" would answer the call with an error.
        out(json.dumps({"jsonrpc": "2.0", "id": rid, "method": "sampling/createMessage",
                        "params": {"messages": [], "maxTokens": 1, "pad": BIG}}),
            answer(rid, "after"))
    elif case == "long_request_id_last":
        out(json.dumps({"method": "elicitation/create", "params": {"pad": BIG},
                        "jsonrpc": "2.0", "id": rid}),
            answer(rid, "after"))
    elif case == "long_notification":
        out(json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                        "params": {"level": "info", "data": BIG}}),
            answer(rid, "after"))
"""


def call(rid: Any, name: str) -> tuple[Any, str, dict[str, Any]]:
    return rid, "tools/call", {"name": name, "arguments": {}}


def proxy_with_server(
    tmp_path: Path,
) -> AbstractAsyncContextManager[tuple[RunningProxy, aiohttp.ClientSession, RawSession]]:
    """The proxy in front of ``SERVER``, and a client session initialized on it."""
    script = tmp_path / "long_lines.py"
    script.write_text(SERVER)
    return proxy_session(
        tmp_path,
        command=[sys.executable, str(script), str(LIMIT)],
        upstream={"max_line_bytes": LIMIT},
    )


async def only_message(s: RawSession, rid: Any, name: str) -> dict[str, Any]:
    got = messages(await asyncio.wait_for(s.request(*call(rid, name)), WAIT))
    assert len(got) == 1, got
    return got[0]


async def assert_session_goes_on(s: RawSession, rid: Any) -> None:
    got = messages(await asyncio.wait_for(s.request(rid, "ping"), WAIT))
    assert got == [{"jsonrpc": "2.0", "id": rid, "result": {}}]


async def test_an_over_long_line_skips_exactly_itself(tmp_path: Path) -> None:
    async with proxy_with_server(tmp_path) as (proxy, _, s):
        for rid, case in enumerate(["just_over_then_answer", "several_then_answer"], 1):
            msg = await only_message(s, rid, case)
            assert msg["id"] == rid and msg["result"]["content"][0]["text"] == "after", msg
        await assert_session_goes_on(s, 10)
        logged = log_events(proxy.log_text(), "upstream_message_too_large")
        assert [e["size"] for e in logged] == [LIMIT + 1, LIMIT + 1, 3 * LIMIT, LIMIT + 7]
        assert all(e["limit"] == LIMIT and e["kind"] == "unknown" for e in logged), logged


async def test_an_over_long_response_is_answered_with_an_error_naming_the_limit(
    tmp_path: Path,
) -> None:
    async with proxy_with_server(tmp_path) as (proxy, _, s):
        for rid, case in [(1, "id_first"), ("call-2", "id_last")]:
            msg = await only_message(s, rid, case)
            assert msg["id"] == rid, msg
            error = msg["error"]
            assert error["code"] == -32000
            assert error["message"] == (
                f"the MCP server's response is over upstream.max_line_bytes ({LIMIT} bytes)"
            )
            assert error["data"] == {"reason": "upstream_message_too_large", "limit": LIMIT}
            await assert_session_goes_on(s, f"ping-{rid}")
        text = proxy.log_text()
        logged = log_events(text, "upstream_message_too_large")
        assert len(logged) == 2 and all(e["kind"] == "response" for e in logged), logged
        assert all(e["size"] > 16 * LIMIT and e["limit"] == LIMIT for e in logged), logged
        assert "x" * 100 not in text, "the content is never logged"


async def test_an_over_long_server_request_is_refused_to_the_server_never_answered_to_the_client(
    tmp_path: Path,
) -> None:
    async with proxy_with_server(tmp_path) as (proxy, _, s):
        cases = ["long_request", "long_request_id_last", "long_notification"]
        for rid, case in enumerate(cases, 1):
            msg = await only_message(s, rid, case)
            assert msg == {
                "jsonrpc": "2.0",
                "id": rid,
                "result": {"content": [{"type": "text", "text": "after"}]},
            }, "the call gets its real answer: no fake response, no relayed request"
        await assert_session_goes_on(s, 10)
        logged = log_events(proxy.log_text(), "upstream_message_too_large")
        assert [e["kind"] for e in logged] == ["request", "request", "notification"], logged
        # The server is not left waiting: each over-long request of its own got an error.
        refused = "answered with error: upstream_message_too_large"
        await eventually(
            lambda: proxy.log_text().count(refused) == 2, what="the server's two refusals"
        )


# LineSplitter: exactly the over-long line is consumed, however the bytes arrive. ---------

SMALL = 32  # the reader's limit in these tests
KEEP = 8


async def read_all(chunks: list[bytes], limit: int = SMALL) -> list[bytes | OverlongLine]:
    """Every line of a stream fed in ``chunks``, split read by read as the stdio reader
    does: one ``feed`` per chunk (one pipe read each), ``end`` at the end."""
    splitter = LineSplitter(limit, KEEP)
    lines = [line for chunk in chunks for line in splitter.feed(chunk)]
    return lines + splitter.end()


def over(line: bytes) -> OverlongLine:
    return OverlongLine(len(line), line[:KEEP], line[-KEEP:])


LONG = b"0123456789" * 4 + b"abcdefgh"  # 48 bytes, over SMALL


@pytest.mark.parametrize(
    "chunks",
    [
        [LONG + b"\nok\n"],  # the newline is already buffered at the overrun
        [LONG, b"\nok\n"],  # ... it arrives after the overrun
        [LONG[:40], LONG[40:] + b"\nok\n"],
        [bytes([b]) for b in LONG + b"\nok\n"],  # byte by byte
        [LONG + b"\n", b"ok\n"],
    ],
    ids=["newline-buffered", "newline-later", "split", "byte-by-byte", "apart"],
)
async def test_splitter_consumes_exactly_the_over_long_line(chunks: list[bytes]) -> None:
    assert await read_all(chunks) == [over(LONG), b"ok"]


async def test_splitter_over_long_lines_in_a_row_and_at_the_end() -> None:
    stream = LONG + b"\n" + LONG * 3 + b"\n\n" + b"x" * (SMALL + 1) + b"\nok\n" + LONG
    expected = [over(LONG), over(LONG * 3), b"", over(b"x" * (SMALL + 1)), b"ok", over(LONG)]
    for size in (1, 5, SMALL, len(stream)):
        chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
        assert await read_all(chunks) == expected, size


async def test_splitter_keeps_a_line_of_exactly_the_limit() -> None:
    assert await read_all([b"y" * SMALL + b"\n", b"y" * (SMALL + 1) + b"\n"]) == [
        b"y" * SMALL,
        over(b"y" * (SMALL + 1)),
    ]
    assert await read_all([b"last line without newline"]) == [b"last line without newline"]


async def test_splitter_takes_a_huge_line_in_bounded_pieces() -> None:
    huge = b"{" + b"z" * (3 * 1024 * 1024) + b"}"
    lines = await read_all([huge[i : i + 65536] for i in range(0, len(huge), 65536)] + [b"\n"])
    assert lines == [over(huge)]


@given(
    st.lists(st.binary(max_size=3 * SMALL).map(lambda b: b.replace(b"\n", b"")), max_size=8),
    st.booleans(),
    st.lists(st.integers(1, 2 * SMALL), min_size=1, max_size=10),
)
def test_splitter_under_any_chunking(
    lines: list[bytes], last_newline: bool, sizes: list[int]
) -> None:
    stream = b"\n".join(lines) + (b"\n" if last_newline and lines else b"")
    chunks: list[bytes] = []
    i = 0
    while i < len(stream):
        size = sizes[len(chunks) % len(sizes)]
        chunks.append(stream[i : i + size])
        i += size
    expected: list[bytes | OverlongLine] = [
        over(line) if len(line) > SMALL else line for line in lines
    ]
    if lines and not last_newline and not lines[-1]:
        expected.pop()  # an empty last line without its newline is no line
    assert asyncio.run(read_all(chunks)) == expected


# outline: the top-level id of a response, from the two ends of its line. -------------


def ends(line: bytes, keep: int) -> Outline:
    return outline(line[:keep], line[-keep:])


def test_outline_of_the_sdks_orders_with_nested_ids() -> None:
    pad = "x" * 10_000
    python_sdk = {"jsonrpc": "2.0", "id": 3, "result": {"content": [{"id": 7, "text": pad}]}}
    typescript_sdk = {"result": {"content": [{"text": pad, "id": 7}]}, "jsonrpc": "2.0", "id": 3}
    for obj in (python_sdk, typescript_sdk):
        for separators in ((",", ":"), (", ", ": ")):
            line = json.dumps(obj, separators=separators).encode()
            shape = ends(line, 1000)
            assert shape.kind == "response" and shape.response_id == 3, (obj, shape)
            assert ends(line, len(line)) == Outline(frozenset(obj), 3)
    assert ends(b'{"result": {}, "id": "a\\"}b"}', 100).response_id == 'a"}b'
    assert ends(b'{"error": {"code": 1, "message": "m"}, "id": -2}', 12).response_id == -2


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (b'{"jsonrpc":"2.0","id":5,"method":"sampling/createMessage","params":{}}', "request"),
        (b'{"method":"elicitation/create","params":{},"jsonrpc":"2.0","id":5}', "request"),
        (b'{"jsonrpc":"2.0","method":"notifications/message","params":{"id":5}}', "notification"),
        (b'{"jsonrpc":"2.0","id":5,"result":{},"method":"x"}', "request"),
        (b'[{"jsonrpc":"2.0","id":5,"result":{}}]', "unknown"),  # a batch: not read
        (b"########", "unknown"),
        (b'{"params":{"result":1,"error":2,"id":5}}', "unknown"),
    ],
)
def test_outline_answers_only_responses(line: bytes, kind: str) -> None:
    for keep in range(1, len(line) + 1):
        shape = ends(line, keep)
        assert shape.response_id is None, (keep, shape)
    assert ends(line, len(line)).kind == kind


@pytest.mark.parametrize(
    "line",
    [
        rb'{"result":{"text":"}\"id\":9,{"},"jsonrpc":"2.0","id":4}',
        rb'{"jsonrpc":"2.0","id":4,"result":{"t":"\\","id":9,"u":"\\\"id\":9"}}',
        rb'{"result":["{","\\\\\"},\"id\":9}","]"],"id":4}',
        rb'{ "id" : 4 , "result" : { "id" : 9 , "a" : [ { "id" : 9 } ] } }',
        rb'{"result":{"id":9},"id":4,"more":{"id":9,"s":"\\\\"}}',
        rb'{"result":{"id":9},"i\u0064":4}',
        rb'{"id":9,"result":null,"id":4}',  # duplicates: the last one, as json.loads
    ],
)
def test_outline_never_takes_a_nested_id_whatever_the_window(line: bytes) -> None:
    assert json.loads(line)["id"] == 4
    for keep in range(1, len(line) + 1):
        assert ends(line, keep).id in (None, 4), keep
    assert ends(line, len(line)).response_id == 4


def test_outline_of_ids_that_are_not_ids() -> None:
    for value in (b"null", b"1.5", b"1e3", b"true", b"[1]", b"{}", b"01", b"9" * 5000):
        assert ends(b'{"result":{},"id":' + value + b"}", 100_000).id is None, value
    assert ends(b'{"id":"\\ud800","result":{}}', 100).id == "\ud800"  # a lone surrogate
    assert ends(b'{"id":"\xff","result":{}}', 100).id is None  # not UTF-8


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(["id", "result", "error", "method", "{", '"']) | st.text(),
            inner,
            max_size=4,
        )
    ),
    max_leaves=20,
)
ids = st.integers(-(2**63), 2**63) | st.text()


@given(json_values, ids, st.booleans(), st.booleans(), st.integers(1, 400), st.booleans())
@example({"a": "\\"}, 1, False, True, 20, False)
def test_outline_reads_the_true_id_or_nothing(
    result: Any, rid: int | str, id_first: bool, spaced: bool, keep: int, ascii: bool
) -> None:
    members = [("jsonrpc", "2.0"), ("id", rid)]
    obj = dict([*members, ("result", result)] if id_first else [("result", result), *members])
    separators = (", ", ": ") if spaced else (",", ":")
    line = json.dumps(obj, separators=separators, ensure_ascii=ascii).encode()
    shape = ends(line, keep)
    assert shape.id in (None, rid) and shape.keys <= set(obj), shape

    # What the ends must hold to show a response and its id: the head through the name
    # "result" (and the id before it), the tail from the byte before the name "id".
    def size(value: dict[str, Any]) -> int:
        return len(json.dumps(value, separators=separators, ensure_ascii=ascii).encode())

    if id_first:
        seen = size({**dict(members), "result": None}) - len("null}")
    else:
        seen = max(size({"result": None}) - len("null}"), size({"id": rid}))
    if keep >= seen or keep >= len(line):
        assert shape.response_id == rid, (line, shape)


@given(st.binary(max_size=300), st.binary(max_size=300))
@example(b'{"id":', b'\\"x"}')
@example(b"{" * 100, b"}" * 100)
@example(b'{"id":1', b'"id":1}')
def test_outline_of_garbage_returns_an_id_or_none_and_never_raises(
    head: bytes, tail: bytes
) -> None:
    shape = outline(head, tail)
    assert shape.id is None or isinstance(shape.id, int | str)
    assert shape.kind in ("response", "request", "notification", "unknown")


@given(
    st.dictionaries(st.sampled_from(["id", "result", "method"]) | st.text(), json_values | ids),
    st.integers(0, 300),
    st.integers(0, 300),
    st.booleans(),
)
def test_outline_of_any_object_shows_only_what_is_there(
    obj: dict[str, Any], head: int, tail: int, spaced: bool
) -> None:
    separators = (", ", ": ") if spaced else (",", ":")
    line = json.dumps(obj, separators=separators, ensure_ascii=False).encode()
    shape = outline(line[:head], line[len(line) - tail :])
    assert shape.keys <= set(obj), shape
    assert shape.id is None or shape.id == obj["id"], shape
