from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.errors import ResumeError
from proxy.core.stream import (
    TRANSITIONS,
    IllegalTransition,
    StreamEvent,
    StreamLog,
    StreamState,
    transition,
)


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
