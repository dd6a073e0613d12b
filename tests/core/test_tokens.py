from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.tokens import resume_token_for, token_matches

KEY = b"s" * 32


def test_tokens_are_bound_to_key_session_and_stream() -> None:
    token = resume_token_for(KEY, "session-a", "ep.1")
    assert len(token) == 43 and token.isascii()  # 256 bits, base64url, no padding
    assert token_matches(KEY, "session-a", "ep.1", token)
    assert not token_matches(KEY, "session-b", "ep.1", token)
    assert not token_matches(KEY, "session-a", "ep.2", token)
    assert not token_matches(b"t" * 32, "session-a", "ep.1", token)


@given(st.one_of(st.none(), st.integers(), st.text(max_size=60), st.lists(st.text())))
def test_anything_else_presented_is_refused_without_error(presented: object) -> None:
    assert not token_matches(KEY, "s", "ep.1", presented)
