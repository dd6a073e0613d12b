"""Resume tokens for the seed's stream protocol (DESIGN.md §7).

A token is ``base64url(HMAC-SHA256(secret, message))`` where ``message`` is
``session_id NUL stream_id`` when the session belongs to nobody (inbound authentication
off) and ``session_id NUL stream_id NUL principal`` when it belongs to a principal:
unguessable without the secret, bound to one session, one stream and one principal by
construction, and nothing to store per stream. A token presented by another principal
than the one it was minted for does not match, whatever else it names.

Neither id may contain NUL (they never do: both are minted by the proxy), so the message
is unambiguous: no principal, the empty principal and every name give different messages.
Without a principal the message is the one tokens had before principals were bound, so
tokens handed out by an earlier version (a stream kept across a restart, a replica not yet
upgraded) stay valid when authentication is off.

The secret comes from config or environment (so that a persistent store's tokens survive
a restart) or is drawn at random by the runtime when the proxy starts. Tokens are
compared in constant time and never logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac


def _message(session_id: str, stream_id: str, principal: str | None) -> bytes | None:
    """What is signed; None when an id holds NUL (no token is ever minted for it)."""
    if "\0" in session_id or "\0" in stream_id:
        return None
    text = f"{session_id}\0{stream_id}"
    if principal is not None:
        text += f"\0{principal}"
    return text.encode(errors="surrogatepass")


def resume_token_for(
    secret: bytes, session_id: str, stream_id: str, *, principal: str | None = None
) -> str:
    """The token of stream ``stream_id`` of session ``session_id``, held by ``principal``
    (None: authentication is off). Raises ``ValueError`` for an id holding NUL."""
    message = _message(session_id, stream_id, principal)
    if message is None:
        raise ValueError("session and stream ids must not contain NUL")
    mac = hmac.new(secret, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def token_matches(
    secret: bytes,
    session_id: str,
    stream_id: str,
    token: object,
    *,
    principal: str | None = None,
) -> bool:
    """Constant-time check of a presented token, for a request made by ``principal``."""
    if not isinstance(token, str) or _message(session_id, stream_id, principal) is None:
        return False
    expected = resume_token_for(secret, session_id, stream_id, principal=principal)
    return hmac.compare_digest(expected.encode(), token.encode(errors="replace"))
