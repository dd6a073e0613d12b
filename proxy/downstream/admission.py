"""Carrying out :mod:`proxy.core.admission` for ``/mcp`` and ``/ws``: a POST's last checks
against its session, then the session fed on a connection of its own.

The transports differ only in how they find the session and how they write the answer
(an SSE response, or WebSocket frames); what happens between is here, once.
"""

from __future__ import annotations

from proxy.core.admission import check_upstream_reading
from proxy.core.errors import ProxyError
from proxy.core.events import ClientPost
from proxy.core.jsonrpc import Message
from proxy.runtime import ClientConn, SessionRunner


def check_session_reading(runner: SessionRunner, max_pending_bytes: int) -> None:
    """``Overloaded`` (``upstream_busy``) when ``runner``'s server is not reading its input."""
    check_upstream_reading(runner.upstream.pending_bytes, max_pending_bytes)


async def post_to_session(
    runner: SessionRunner,
    messages: list[Message],
    batch: bool,
    *,
    framing: str,
    opens_session: bool,
    last_event_id: str | None = None,
) -> ClientConn | None:
    """Feed an admitted POST to ``runner`` on a new connection (``framing`` as the
    transport writes it): the connection to write out when the session answers with a
    stream, else None (notifications and responses only: accepted, nothing to answer).

    A refusal by the session raises ``ProxyError`` and leaves no connection behind; when
    the POST ``opens_session`` (its initialize), the session it opened ends with it.
    """
    conn = runner.open_conn(framing)
    try:
        runner.feed(ClientPost(conn.id, messages, batch, last_event_id))
    except ProxyError:
        runner.conn_gone(conn)
        if opens_session:
            await runner.end("initialize refused")
        raise
    if conn.outcome != "sse":
        runner.conn_gone(conn)
        return None
    return conn
