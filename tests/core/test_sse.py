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


def decode_until_broken(
    data: bytes, cuts: list[int], max_line_bytes: int = 64 * 1024 * 1024
) -> tuple[list[SSEEvent], SSEDecodeError | None]:
    """The events handed out when ``data`` is fed in pieces of ``cuts`` (then the rest),
    and the decoder's error once it is broken (no more is fed then)."""
    dec = SSEDecoder(max_line_bytes)
    got: list[SSEEvent] = []
    pos = 0
    for size in [*cuts, len(data)]:
        got += dec.feed(data[pos : pos + size])
        pos += size
        if dec.error is not None:
            break
    return got, dec.error


def bytewise(data: bytes) -> list[int]:
    return [1] * len(data)


def test_invalid_utf8_and_overlong_lines_raise_the_documented_error() -> None:
    for dec, bad in [
        (SSEDecoder(), b"data: \xff\n\n"),
        (SSEDecoder(max_line_bytes=10), b"data: " + b"x" * 20),
        (SSEDecoder(max_line_bytes=10), b"data: " + b"x" * 20 + b"\n\n"),
    ]:
        assert dec.feed(bad) == []
        assert isinstance(dec.error, SSEDecodeError)
        with pytest.raises(SSEDecodeError):
            dec.feed(b"data: after\n\n")
        with pytest.raises(SSEDecodeError):
            dec.feed(b"")


LIMIT = 128  # over any line of the events sent below
BEFORE = (
    encode_event(None, event_id="e.1.0.1")
    + encode_event(b'{"a":1}', event_id="e.1.1")
    + encode_event(b'{"b":2}', event_id="e.1.2")
)
BEFORE_EVENTS = [
    SSEEvent(data="", id="e.1.0.1"),
    SSEEvent(data='{"a":1}', id="e.1.1"),
    SSEEvent(data='{"b":2}', id="e.1.2"),
]
AFTER = encode_event(b'{"c":3}', event_id="e.1.3")
BAD_LINES = {
    "not utf-8": b"data: \xff\xfe\n\n",
    "too long, whole": b"data: " + b"x" * 200 + b"\n\n",
    "too long, cut off": b"data: " + b"x" * 200,
    "too long, half an event before": b"id: e.1.9\ndata: half\ndata: " + b"x" * 200 + b"\n\n",
}


@pytest.mark.parametrize("fed", ["whole", "bytewise"])
@pytest.mark.parametrize("bad", BAD_LINES)
def test_a_bad_line_still_hands_out_every_event_completed_before_it(fed: str, bad: str) -> None:
    """Issue 23: the feed that met a bad line raised, and the events it had completed
    before it (with their ids, the resume position) were lost."""
    wire = BEFORE + BAD_LINES[bad] + (b"\n\n" if bad == "too long, cut off" else b"") + AFTER
    cuts = [len(wire)] if fed == "whole" else bytewise(wire)
    got, error = decode_until_broken(wire, cuts, max_line_bytes=LIMIT)
    assert got == BEFORE_EVENTS
    assert isinstance(error, SSEDecodeError)


def test_the_events_of_the_chunk_that_breaks_the_stream_come_before_the_error() -> None:
    dec = SSEDecoder(max_line_bytes=LIMIT)
    assert dec.feed(BEFORE[:10]) == []
    assert dec.feed(BEFORE[10:] + b"data: \xff\n\n" + AFTER) == BEFORE_EVENTS
    assert dec.error is not None
    with pytest.raises(SSEDecodeError):
        dec.feed(AFTER)


events_strategy = st.lists(
    st.tuples(
        st.text(
            st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=20
        ),
        st.none()
        | st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=8),
    ),
    max_size=8,
)


@given(
    events_strategy,
    st.sampled_from(sorted(BAD_LINES.values())),
    st.binary(max_size=60),
    st.lists(st.integers(1, 50), max_size=20),
)
def test_a_stream_that_turns_bad_delivers_what_came_before_it(
    sent: list[tuple[str, str | None]], bad: bytes, tail: bytes, cuts: list[int]
) -> None:
    """Whatever follows the bad line and however the bytes are cut, the events before it
    come out, each with its id."""
    wire = b"".join(encode_event(d.encode(), event_id=i) for d, i in sent)
    expected = decode_whole(wire)
    assert [e.data for e in expected] == [d for d, _ in sent]
    got, error = decode_until_broken(wire + bad + tail, cuts, max_line_bytes=LIMIT)
    assert got == expected
    assert error is not None


@given(
    st.binary(max_size=300),
    st.lists(st.integers(1, 50), max_size=20),
    st.integers(1, 40) | st.just(64 * 1024 * 1024),
)
def test_garbage_parses_the_same_in_any_chunking_or_raises_documented(
    data: bytes, cuts: list[int], max_line_bytes: int
) -> None:
    """The same events, and the same break (or none), fed whole or in any pieces."""
    whole = decode_until_broken(data, [len(data)], max_line_bytes)
    got = decode_until_broken(data, cuts, max_line_bytes)
    assert got[0] == whole[0]
    assert (got[1] is None) == (whole[1] is None)
    if whole[1] is not None:
        assert got[1] is not None and got[1].message == whole[1].message
