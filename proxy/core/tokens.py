"""Resume tokens for the seed's stream protocol (DESIGN.md §7).

A token is ``base64url(HMAC-SHA256(secret, session_id NUL stream_id))``: unguessable
without the secret, bound to one session and one stream by construction, and nothing to
store per stream. The secret comes from config or environment (so that a persistent
store's tokens survive a restart) or is drawn at random by the runtime when the proxy
starts. Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac


def resume_token_for(secret: bytes, session_id: str, stream_id: str) -> str:
    mac = hmac.new(secret, f"{session_id}\0{stream_id}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


def token_matches(secret: bytes, session_id: str, stream_id: str, token: object) -> bool:
    """Constant-time check of a presented token."""
    if not isinstance(token, str):
        return False
    expected = resume_token_for(secret, session_id, stream_id)
    return hmac.compare_digest(expected.encode(), token.encode(errors="replace"))
