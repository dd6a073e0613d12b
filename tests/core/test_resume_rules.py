"""The resume rules (proxy/core/resume_rules.py), pure: which positions a stream can be
resumed from, wherever it is held, and what each refusal says."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.errors import ProxyError, ResumeError, SessionNotFound
from proxy.core.resume_rules import HeldIn, check_position, check_resume, check_unfinished


def refusal(after: int, **stream: object) -> ProxyError | None:
    """What check_resume raises for ``after`` on ``stream`` (None: it may resume)."""
    try:
        check_resume(after, **stream)  # type: ignore[arg-type]
    except ProxyError as exc:
        return exc
    return None


def live(first_kept: int, last: int, held_in: HeldIn = HeldIn.STORE) -> dict[str, object]:
    return dict(
        first_kept=first_kept, last=last, held_in=held_in, completed=False, standalone=False
    )


@pytest.mark.parametrize(
    ("after", "first_kept", "last"),
    [
        (0, 1, 0),  # nothing written yet: from the start
        (0, 1, 5),  # from the start, all still held
        (5, 1, 5),  # has it all, the stream goes on
        (3, 4, 9),  # the first event after 3 is the oldest held
        (9, 10, 9),  # everything trimmed, and the client has everything
    ],
)
def test_a_whole_replay_may_resume(after: int, first_kept: int, last: int) -> None:
    assert refusal(after, **live(first_kept, last)) is None


@pytest.mark.parametrize(("after", "last"), [(-1, 5), (6, 5), (1, 0)])
def test_a_position_never_reached_is_unknown(after: int, last: int) -> None:
    found = refusal(after, **live(1, last))
    assert isinstance(found, ResumeError)
    assert (found.reason, found.http_status) == ("unknown_position", 400)
    assert found.message == "Last-Event-ID names a position this stream never reached"


@pytest.mark.parametrize(
    ("held_in", "message"),
    [
        (HeldIn.BUFFER, "the events after Last-Event-ID were dropped from the buffer"),
        (HeldIn.STORE, "the events after Last-Event-ID are no longer in the store"),
    ],
)
def test_a_replay_with_a_hole_is_truncated(held_in: HeldIn, message: str) -> None:
    found = refusal(2, **live(4, 9, held_in))
    assert isinstance(found, ResumeError)
    assert (found.reason, found.http_status, found.message) == ("history_truncated", 410, message)


def test_a_completed_stream_the_client_has_whole_is_over() -> None:
    done = dict(first_kept=1, last=5, held_in=HeldIn.BUFFER, completed=True)
    found = refusal(5, **done, standalone=False)
    assert isinstance(found, ResumeError)
    assert (found.reason, found.http_status) == ("stream_completed", 410)
    assert found.message == "the stream is complete and the client already has all of it"
    # The standalone stream completes only with its session: that session has ended.
    found = refusal(5, **done, standalone=True)
    assert isinstance(found, SessionNotFound)
    assert (found.http_status, found.message) == (404, "Session not found: it has ended")
    # With events still to give, it is resumed like any other.
    assert refusal(4, **done, standalone=True) is None


def test_the_position_is_judged_before_completion() -> None:
    """A position past the end of a completed stream is unknown, not "you have it all"."""
    found = refusal(6, first_kept=1, last=5, held_in=HeldIn.STORE, completed=True, standalone=True)
    assert isinstance(found, ResumeError) and found.reason == "unknown_position"


def test_check_resume_is_the_two_rules_in_order() -> None:
    check_position(5, first_kept=1, last=5, held_in=HeldIn.STORE)
    with pytest.raises(ResumeError, match="stream is complete"):
        check_unfinished(5, last=5, completed=True, standalone=False)
    check_unfinished(5, last=5, completed=False, standalone=True)


@given(
    after=st.integers(-3, 12),
    last=st.integers(0, 10),
    trimmed=st.integers(0, 11),
    completed=st.booleans(),
    standalone=st.booleans(),
)
def test_the_rules_against_a_model(
    after: int, last: int, trimmed: int, completed: bool, standalone: bool
) -> None:
    """The model: the events after ``after`` are ``after+1 .. last``; the client may
    resume iff it named a position written, all of those are held, and either some of
    them exist or more may come."""
    first_kept = min(trimmed, last) + 1  # events 1..trimmed dropped
    found = refusal(
        after,
        first_kept=first_kept,
        last=last,
        held_in=HeldIn.STORE,
        completed=completed,
        standalone=standalone,
    )
    wanted = set(range(after + 1, last + 1))
    held = set(range(first_kept, last + 1))
    if not 0 <= after <= last:
        assert isinstance(found, ResumeError) and found.reason == "unknown_position"
    elif not wanted <= held:
        assert isinstance(found, ResumeError) and found.reason == "history_truncated"
    elif completed and not wanted:
        assert isinstance(found, SessionNotFound if standalone else ResumeError)
    else:
        assert found is None
