from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core import seed
from proxy.core.errors import ResumeError
from proxy.core.stream import (
    TRANSITIONS,
    ByteBudget,
    IllegalTransition,
    StreamEvent,
    StreamLog,
    StreamState,
    transition,
)
from tests.core.poll_reference import full_parse_summary


def test_log_numbers_from_one_and_replays_after_a_position() -> None:
    log = StreamLog(max_events=10, max_bytes=1000)
    assert [log.append(b"a"), log.append(b"b"), log.append(b"c")] == [1, 2, 3]
    assert [e.payload for e in log.after(1)] == [b"b", b"c"]
    assert log.after(3) == []
    assert log.bytes == 3


def test_log_bounds_drop_oldest_and_refuse_resume_into_the_gap() -> None:
    log = StreamLog(max_events=100, max_bytes=10)
    for _ in range(5):
        log.append(b"xxxx")
    assert log.bytes <= 10 and log.first_kept_seq == 4
    assert [e.seq for e in log.after(3)] == [4, 5]
    with pytest.raises(ResumeError) as info:
        log.after(2)
    assert info.value.reason == "history_truncated"
    with pytest.raises(ResumeError) as info:
        log.after(6)
    assert info.value.reason == "unknown_position"


def test_a_single_oversized_event_is_still_kept() -> None:
    log = StreamLog(max_events=1, max_bytes=1)
    log.append(b"big")
    assert len(log) == 1


def test_transition_table() -> None:
    assert transition(StreamState.LIVE, StreamEvent.COMPLETE) is StreamState.COMPLETED
    assert transition(StreamState.COMPLETED, StreamEvent.EXPIRE) is StreamState.EXPIRED
    for state, allowed in TRANSITIONS.items():
        for event in StreamEvent:
            if event not in allowed:
                with pytest.raises(IllegalTransition):
                    transition(state, event)


@given(
    n=st.integers(0, 300),
    max_events=st.integers(1, 400),
    seq=st.integers(-1, 310),
)
def test_after_is_exactly_the_kept_events_past_seq(n: int, max_events: int, seq: int) -> None:
    log = StreamLog(max_events=max_events, max_bytes=10**9)
    for i in range(n):
        log.append(str(i + 1).encode())
    first = max(1, n - max_events + 1)
    if seq < 0 or seq > n:
        with pytest.raises(ResumeError, match="never reached"):
            log.after(seq)
    elif seq + 1 < first:
        with pytest.raises(ResumeError, match="dropped"):
            log.after(seq)
    else:
        assert [e.payload for e in log.after(seq)] == [
            str(i).encode() for i in range(seq + 1, n + 1)
        ]


# ---------------------------------------------------------------- poll summary (seed)

MESSAGES: list[dict[str, Any]] = [
    {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}},
    {"jsonrpc": "2.0", "id": 4, "method": "elicitation/create", "params": {}},
    {"jsonrpc": "2.0", "id": 4, "result": {"content": []}},
    {"jsonrpc": "2.0", "id": 4, "result": {"content": [], "isError": True}},
    {"jsonrpc": "2.0", "id": 4, "result": {"isError": "yes"}},  # not True: no error
    {"jsonrpc": "2.0", "id": 4, "result": 5},
    {"jsonrpc": "2.0", "id": 4, "error": {"code": -1, "message": "no"}},
    {"jsonrpc": "2.0", "method": "notifications/message", "error": "odd"},
]

LOG_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, len(MESSAGES) - 1)),
        st.tuples(st.just("ack"), st.integers(0, 40)),
        st.tuples(st.just("clear"), st.just(0)),
    ),
    max_size=60,
)


def summaries(log: StreamLog) -> tuple[object, object]:
    """(incremental, full parse): each the poll flags, or the resume error's reason."""
    incremental: object
    try:
        result = seed.poll_result("s", False, log.unacknowledged())
        incremental = {k: result[k] for k in ("pendingMessages", "hasRequest", "hasError")}
    except ResumeError as exc:
        incremental = exc.reason
    try:
        full: object = full_parse_summary([e.payload for e in log.after(log.acked)])
    except ResumeError as exc:
        full = exc.reason
    return incremental, full


@settings(max_examples=300)
@given(
    ops=LOG_OPS,
    block=st.booleans(),
    max_events=st.integers(1, 8),
    max_bytes=st.integers(1, 600),
    budget=st.integers(50, 2000),
)
def test_the_incremental_poll_summary_is_the_full_parse_one(
    ops: list[tuple[str, int]], block: bool, max_events: int, max_bytes: int, budget: int
) -> None:
    """Appends, acknowledgements, trims (own bounds, shared budget) and clears, in any
    order: the summary kept at append time equals parsing every unacknowledged payload."""
    shared = ByteBudget(budget)
    other = StreamLog(1000, 10**9, shared)  # another stream's events eat the budget too
    log = StreamLog(max_events, max_bytes, shared)
    if block:
        log.keep_after = 0
    for op, arg in ops:
        if op == "append":
            msg = MESSAGES[arg]
            log.append(json.dumps(msg).encode(), seed.poll_mark(msg))
            other.append(b"x" * arg)
        elif op == "ack":
            log.acknowledge(min(log.acked + arg, log.last_seq))
        else:
            log.clear()
        incremental, full = summaries(log)
        assert incremental == full, (op, arg)
