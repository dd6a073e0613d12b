"""SSE encoder/decoder: same events whole or byte by byte; garbage → documented error."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.sse import (
    SSEDecodeError,
    SSEDecoder,
    SSEEvent,
    encode_comment,
    encode_event,
    encode_retry,
)


def decode_whole(data: bytes) -> list[SSEEvent]:
    return SSEDecoder().feed(data)


def decode_bytewise(data: bytes) -> list[SSEEvent]:
    dec = SSEDecoder()
    out: list[SSEEvent] = []
    for i in range(len(data)):
        out += dec.feed(data[i : i + 1])
    return out


def test_round_trip_of_what_the_proxy_writes() -> None:
    wire = (
        encode_event(None, event_id="e.1.0.1")
        + encode_comment("keepalive")
        + encode_event(b'{"a":1}', event_id="e.1.1")
        + encode_event(b'{"b":2}', event_id="e.1.2")
        + encode_retry(500)
    )
    expected = [
        SSEEvent(data="", id="e.1.0.1"),
        SSEEvent(data='{"a":1}', id="e.1.1"),
        SSEEvent(data='{"b":2}', id="e.1.2"),
        SSEEvent(data="", event="", id="e.1.2", retry=500),
    ]
    assert decode_whole(wire) == expected
    assert decode_bytewise(wire) == expected


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_whatwg_field_rules(newline: bytes) -> None:
    text = newline.join(
        [
            b"\xef\xbb\xbf: comment",
            b"event: custom",
            b"data: one",
            b"data:two",
            b"id: 7",
            b"retry: x1",
            b"unknown: y",
            b"",
            b"data",
            b"",
            b"id: bad\x00id",
            b"data: z",
            b"",
            b"data: cut off",
        ]
    )
    events = [
        SSEEvent(data="one\ntwo", event="custom", id="7"),
        SSEEvent(data="", id="7"),
        SSEEvent(data="z", id="7"),
    ]
    assert decode_whole(text) == events
    assert decode_bytewise(text) == events


def test_an_event_cut_before_its_blank_line_is_not_dispatched() -> None:
    dec = SSEDecoder()
    assert dec.feed(b"id: 1\ndata: x\n") == []
    assert dec.feed(b"\n") == [SSEEvent(data="x", id="1")]


def test_invalid_utf8_and_overlong_lines_raise_the_documented_error() -> None:
    with pytest.raises(SSEDecodeError):
        SSEDecoder().feed(b"data: \xff\n\n")
    with pytest.raises(SSEDecodeError):
        SSEDecoder(max_line_bytes=10).feed(b"data: " + b"x" * 20)


@given(st.binary(max_size=300), st.lists(st.integers(1, 50), max_size=20))
def test_garbage_parses_the_same_in_any_chunking_or_raises_documented(
    data: bytes, cuts: list[int]
) -> None:
    try:
        whole = decode_whole(data)
    except SSEDecodeError:
        return
    dec = SSEDecoder()
    got: list[SSEEvent] = []
    pos = 0
    for size in [*cuts, len(data)]:
        got += dec.feed(data[pos : pos + size])
        pos += size
    assert got == whole
