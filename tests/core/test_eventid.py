from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.errors import ResumeError
from proxy.core.eventid import EventPosition, format_event_id, parse_event_id


@given(
    st.text(alphabet="abcdef0123456789", min_size=1, max_size=12),
    st.integers(0, 10**9),
    st.integers(0, 10**9),
    st.none() | st.integers(1, 1000),
)
def test_round_trip(epoch: str, stream: int, seq: int, attach: int | None) -> None:
    assert parse_event_id(format_event_id(epoch, stream, seq, attach)) == EventPosition(
        epoch, stream, seq
    )


@pytest.mark.parametrize(
    "text",
    ["", "a", "a.1", "a.1.2.3.4", "a.-1.2", "a.1.x", "é.1.2", "a.1.99999999999999999", "a b.1.2"],
)
def test_malformed(text: str) -> None:
    with pytest.raises(ResumeError) as info:
        parse_event_id(text)
    assert info.value.reason == "malformed_event_id"


@given(st.text(max_size=40))
def test_anything_parses_or_raises_malformed(text: str) -> None:
    try:
        parse_event_id(text)
    except ResumeError as exc:
        assert exc.reason == "malformed_event_id"
