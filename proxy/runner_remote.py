"""What a session runner does for a client of another replica (:mod:`proxy.replicas`).

The registry serves the requests another replica forwards for one of this replica's
sessions (:meth:`~proxy.registry.Registry.serve_forwarded`): a POST or a GET is fed to
the session on a connection that leaves at once, since the asker serves the stream from
the shared log, and is answered once the store has what it started; an acknowledgement
tells the session how far the client got there.
"""

from __future__ import annotations

from typing import assert_never

from proxy.core import jsonrpc
from proxy.core.eventid import parse_event_id
from proxy.core.events import ClientAck, ClientGet, ClientPost
from proxy.core.session import STANDALONE
from proxy.forwarding import ForwardedGet, ForwardedPost, NoStream, StreamOpened
from proxy.runtime import SessionRunner

__all__ = ["acknowledge", "serve_remote"]


def acknowledge(runner: SessionRunner, last_event_id: str) -> None:
    """The client resumed from ``last_event_id`` on another replica."""
    pos = parse_event_id(last_event_id)
    if pos.epoch == runner.session.epoch:
        runner.feed(ClientAck(pos.stream, pos.seq))
        if pos.stream == STANDALONE:
            runner.seat.acknowledged(pos.seq)


async def serve_remote(
    runner: SessionRunner, message: ForwardedPost | ForwardedGet
) -> StreamOpened | NoStream:
    """Feed a forwarded POST or GET on a connection that leaves at once; the stream
    it opened (and where its client starts) once the store has it."""
    session = runner.session
    conn = runner.open_conn()
    after = 0
    try:
        match message:
            case ForwardedPost():
                messages, batch = jsonrpc.parse_body(message.body)
                runner.feed(ClientPost(conn.id, messages, batch, message.last_event_id))
            case ForwardedGet():
                after = session.sent_upto(STANDALONE)
                runner.feed(ClientGet(conn.id))
            case _:
                assert_never(message)
        number = session.stream_of(conn.id)
    finally:
        runner.conn_gone(conn)
    if runner.store is not None:
        await runner.store.caught_up()
    if conn.outcome != "sse" or number is None:
        return NoStream()
    # The asker opens its client's stream with the priming event the session gave
    # this connection (2025-11-25 transports §Resumability), as this replica would.
    key, primed = f"{session.epoch}.{number}", conn.priming
    if primed is None:
        return StreamOpened(key, after)
    return StreamOpened(key, after, primed.event_id, primed.retry_ms)
