"""May a POSTed message reach a legacy session? The rules ``/mcp`` and ``/ws`` share.

Both client transports take a POST body (an HTTP body, or a WebSocket text frame) and
decide, before the session sees it, whether it opens a session, goes to the session it
names, or is refused. The decisions are pure and live here; carrying them out (creating
the session, feeding it, writing the answer) is :mod:`proxy.downstream.admission`'s. Each
transport keeps its own wire form for a refusal (an HTTP status, or an error frame).

- **initialize alone and once.** 2025-11-25 basic/lifecycle §Initialization: the
  initialization phase MUST be the first interaction, and a session is initialized once;
  2025-03-26 basic §Batching: ``initialize`` MUST NOT be part of a JSON-RPC batch. The
  same rule guards the core :class:`~proxy.core.session.Session` itself.
- **No new session while shutting down.** A proxy that stopped accepting answers an
  ``initialize`` with 404 ``SessionNotFound`` (the client starts over elsewhere).
- **A server that does not read.** ``upstream.max_pending_bytes``: a POST for a session
  whose server has that much unread input is refused (``upstream_busy``) rather than
  queued without bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from proxy.core.errors import BadRequest, Overloaded, SessionNotFound
from proxy.core.jsonrpc import Kind, Message

INITIALIZE = "initialize"


def initialize_of(messages: Sequence[Message]) -> Message | None:
    """The ``initialize`` request among ``messages``, if there is one."""
    return next((m for m in messages if m.kind is Kind.REQUEST and m.method == INITIALIZE), None)


def check_initialize(
    messages: Sequence[Message], batch: bool, *, initialized: bool
) -> Message | None:
    """The ``initialize`` request of a POST (None: it has none); ``BadRequest`` when it
    is not alone (a batch, or beside other messages) or the session is ``initialized``
    already (2025-11-25 basic/lifecycle §Initialization, 2025-03-26 basic §Batching)."""
    init = initialize_of(messages)
    if init is None:
        return None
    if batch or len(messages) > 1:
        raise BadRequest("Bad Request: initialize must not be part of a batch")
    if initialized:
        raise BadRequest("Bad Request: this session is already initialized")
    return init


@dataclass(frozen=True, slots=True)
class PostAdmission:
    """Where a POST that passed :func:`admit_post` goes."""

    initialize: Message | None  # set: it opens a new session with this request

    @property
    def opens_session(self) -> bool:
        return self.initialize is not None


def admit_post(
    messages: Sequence[Message], batch: bool, *, initialized: bool, accepting: bool
) -> PostAdmission:
    """The first decisions on a POST body, in order: initialize alone and once (see
    :func:`check_initialize`; ``initialized``: the connection names a session already),
    then no new session once the proxy stopped ``accepting`` (``SessionNotFound``).

    A POST without ``initialize`` goes to its session; finding that session is the
    transport's (a header on ``/mcp``, the socket's own on ``/ws``)."""
    init = check_initialize(messages, batch, initialized=initialized)
    if init is not None and not accepting:
        raise SessionNotFound("the proxy is shutting down")
    return PostAdmission(init)


def check_upstream_reading(pending_bytes: int, max_pending_bytes: int) -> None:
    """``Overloaded`` (``upstream_busy``) when the server has more than
    ``max_pending_bytes`` (``upstream.max_pending_bytes``) of unread input."""
    if pending_bytes > max_pending_bytes:
        raise Overloaded(
            "The MCP server is not reading its input; try again later",
            reason="upstream_busy",
        )
