"""proxy/core/lone_answer.py: when a held POST's answer goes as application/json."""

from __future__ import annotations

import pytest

from proxy.core import jsonrpc
from proxy.core.lone_answer import (
    SSE,
    WAIT,
    event_data,
    is_answer,
    is_priming,
    prefers_json,
    verdict,
)
from proxy.core.sse import SSEDecoder, encode_event

PRIMING = encode_event(None, event_id="ep0ch.2.0.1", retry_ms=1000)
BIG = jsonrpc.encode({"jsonrpc": "2.0", "id": 7, "result": {"text": "x" * 2000}})
SMALL = jsonrpc.encode({"jsonrpc": "2.0", "id": 7, "result": {}})
ERROR = jsonrpc.encode({"jsonrpc": "2.0", "id": 7, "error": {"code": -1, "message": "e" * 2000}})
NOTE = jsonrpc.encode(
    {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"pad": "p" * 2000}}
)
ASK = jsonrpc.encode({"jsonrpc": "2.0", "id": 1, "method": "elicitation/create", "params": {}})


def event(payload: bytes, seq: int = 1) -> bytes:
    return encode_event(payload, event_id=f"ep0ch.2.{seq}")


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        ("application/json, text/event-stream", True),  # both SDKs, unweighted
        ("text/event-stream, application/json", True),
        ("*/*", True),
        ("application/*, text/event-stream", True),
        ("text/event-stream, application/json;q=0.9", False),  # the shim
        ("application/json;q=0.5, text/event-stream;q=0.4", True),
        ("application/json;q=0, text/event-stream", False),
        ("application/json; q=bogus, text/event-stream", True),
        ("text/event-stream", False),
        (None, False),
    ],
)
def test_json_is_chosen_only_where_the_client_takes_it_as_gladly(
    accept: str | None, expected: bool
) -> None:
    assert prefers_json(accept) is expected


def test_the_data_of_an_event_as_written() -> None:
    assert event_data(event(BIG)) == BIG
    assert event_data(encode_event(BIG)) == BIG
    assert event_data(PRIMING) == b""
    assert is_priming(PRIMING) and is_priming(encode_event(None))
    assert not is_priming(event(SMALL))


def test_answers_are_told_from_requests_and_notifications() -> None:
    assert is_answer(BIG) and is_answer(SMALL) and is_answer(ERROR)
    assert not is_answer(NOTE) and not is_answer(ASK)
    assert not is_answer(b"[1,2]") and not is_answer(b"{not json")


def test_nothing_but_the_priming_event_keeps_the_headers_held() -> None:
    assert verdict([], False, min_bytes=100) is WAIT
    assert verdict([PRIMING], False, min_bytes=100) is WAIT


def test_a_lone_large_answer_goes_as_json() -> None:
    assert verdict([PRIMING, event(BIG)], True, min_bytes=1000) == BIG
    assert verdict([event(BIG)], True, min_bytes=1000) == BIG  # (no priming: 2025-06-18)
    assert verdict([PRIMING, event(ERROR)], True, min_bytes=1000) == ERROR
    assert verdict([PRIMING, event(SMALL)], True, min_bytes=0) == SMALL  # min_bytes 0: all


def test_a_small_answer_stays_sse() -> None:
    assert verdict([PRIMING, event(SMALL)], True, min_bytes=1000) is SSE


def test_anything_before_the_answer_opens_the_stream_at_once() -> None:
    assert verdict([PRIMING, event(NOTE)], False, min_bytes=1000) is SSE
    assert verdict([PRIMING, event(ASK)], False, min_bytes=1000) is SSE
    assert verdict([PRIMING, event(NOTE), event(BIG, 2)], True, min_bytes=1000) is SSE


def test_a_stream_that_ends_without_its_answer_stays_sse() -> None:
    assert verdict([PRIMING], True, min_bytes=1000) is SSE
    # A lone large message that is no answer (a stream taken over, a session ended).
    assert verdict([PRIMING, event(NOTE)], True, min_bytes=1000) is SSE


def test_a_long_line_fed_in_many_chunks_is_read_whole() -> None:
    frame = event(jsonrpc.encode({"jsonrpc": "2.0", "id": 1, "result": {"t": "y" * 3_000_000}}))
    decoder = SSEDecoder()
    events = []
    for i in range(0, len(frame), 4096):
        events += decoder.feed(frame[i : i + 4096])
    assert [e.data.encode() for e in events] == [event_data(frame)]
