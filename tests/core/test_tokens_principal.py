"""Resume tokens bound to the principal a session belongs to (inbound authentication).

``proxy/core/tokens.py``: a token minted for one principal never matches for another, and
no principal (None), the empty name and every name are three different things. The core
session mints and checks its tokens with its own ``principal``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.events import ClientDetached
from proxy.core.tokens import resume_token_for, token_matches
from tests.core.playbook import SECRET, local, payloads, seeded, seeded_call

KEY = b"s" * 32
ids = st.text(max_size=40).filter(lambda t: "\0" not in t)
principals = st.one_of(st.none(), st.text(max_size=20))


@given(ids, ids, principals, principals)
def test_a_token_matches_only_for_the_principal_it_was_minted_for(
    session_id: str, stream_id: str, mine: str | None, other: str | None
) -> None:
    token = resume_token_for(KEY, session_id, stream_id, principal=mine)
    assert token_matches(KEY, session_id, stream_id, token, principal=mine)
    assert token_matches(KEY, session_id, stream_id, token, principal=other) == (mine == other)


@given(ids, ids, st.text(max_size=20))
def test_no_principal_and_the_empty_one_differ_from_every_name(
    session_id: str, stream_id: str, name: str
) -> None:
    nobody = resume_token_for(KEY, session_id, stream_id)
    empty = resume_token_for(KEY, session_id, stream_id, principal="")
    named = resume_token_for(KEY, session_id, stream_id, principal=name)
    assert nobody != empty
    assert nobody != named
    assert (empty == named) == (name == "")


def test_a_principal_cannot_be_smuggled_into_the_stream_id() -> None:
    """``s NUL t NUL alice`` is what alice's token of ``t`` signs: a stream id holding the
    NUL and the name must not produce it for nobody."""
    alices = resume_token_for(KEY, "s", "ep.1", principal="alice")
    assert not token_matches(KEY, "s", "ep.1\0alice", alices)
    with pytest.raises(ValueError):
        resume_token_for(KEY, "s", "ep.1\0alice")
    with pytest.raises(ValueError):
        resume_token_for(KEY, "s\0ep.1", "x")


def test_without_a_principal_the_token_is_the_one_minted_before_principals() -> None:
    """Tokens handed out by an earlier version (a stream kept across an upgrade, a replica
    not yet upgraded) stay valid while authentication is off."""
    mac = hmac.new(KEY, b"session-a\0ep.1", hashlib.sha256).digest()
    earlier = base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    assert resume_token_for(KEY, "session-a", "ep.1") == earlier
    assert token_matches(KEY, "session-a", "ep.1", earlier)
    assert not token_matches(KEY, "session-a", "ep.1", earlier, principal="alice")


# ---------------------------------------------------------------- the core session


def test_a_session_mints_its_tokens_for_its_principal_and_checks_them_so() -> None:
    pb = seeded()
    pb.session.principal = "alice"
    c, _, created = seeded_call(pb)
    assert created["resumeToken"] == resume_token_for(SECRET, "sid", "ep0ch.2", principal="alice")
    pb.feed(ClientDetached(c))

    for token in (
        resume_token_for(SECRET, "sid", "ep0ch.2"),  # nobody's
        resume_token_for(SECRET, "sid", "ep0ch.2", principal="bob"),
        resume_token_for(SECRET, "sid", "ep0ch.2", principal=""),
    ):
        r, out = local(pb, "stream/poll", {"streamId": "ep0ch.2", "resumeToken": token})
        (answer,) = payloads(out, r)
        assert answer["error"]["data"]["reason"] == "invalid_token"

    r, out = local(
        pb, "stream/poll", {"streamId": "ep0ch.2", "resumeToken": created["resumeToken"]}
    )
    (answer,) = payloads(out, r)
    assert answer["result"]["streamId"] == "ep0ch.2"
    assert answer["result"]["status"] == "live"


def test_a_session_of_nobody_keeps_the_tokens_it_always_had() -> None:
    pb = seeded()
    assert pb.session.principal is None
    _, _, created = seeded_call(pb)
    assert created["resumeToken"] == resume_token_for(SECRET, "sid", "ep0ch.2")
