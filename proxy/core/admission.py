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
- **No new work while draining.** A replica told to stop (SIGTERM, ``listen.drain_seconds``)
  lets what runs finish and takes nothing new: an ``initialize`` or a new call gets 503
  ``Draining`` (``proxy_draining``, with ``Retry-After``) so that a balancer or the client
  takes it to another replica (:func:`check_draining`; 2026-07-28 requests:
  :func:`check_modern_draining`). What finishes work already here is served: responses and
  notifications, resumes and polls, task reads and cancels, ``ping``, MRTR retries.
- **A server that does not read.** ``upstream.max_pending_bytes``: a POST for a session
  whose server has that much unread input is refused (``upstream_busy``) rather than
  queued without bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.core import seed
from proxy.core.errors import BadRequest, Draining, Overloaded, ServerRemoved, SessionNotFound
from proxy.core.jsonrpc import Kind, Message
from proxy.core.modern_routes import Route, route

# (Enum members read as module constants: through the class, 3.11's ``EnumType.__getattr__``
# hook makes each read cost ~25 times a global's, and these are read per event.)
_REQUEST = Kind.REQUEST

INITIALIZE = "initialize"

DRAIN_ACCEPTED = frozenset(
    {seed.POLL, seed.RESUME, "tasks/get", "tasks/result", "tasks/list", "tasks/cancel", "ping"}
)
"""The legacy requests a draining replica still serves: they finish or follow work that
is already here (or cost nothing), never start any."""

MODERN_DRAIN_REFUSED = frozenset({Route.DISCOVER, Route.START, Route.LISTEN})
"""What a draining replica refuses of 2026-07-28 requests: a client's first request
(``server/discover``), a new call, a new listen stream. A retry (``requestState``) and
the task requests continue a call already here."""


def initialize_of(messages: Sequence[Message]) -> Message | None:
    """The ``initialize`` request among ``messages``, if there is one."""
    return next((m for m in messages if m.kind is _REQUEST and m.method == INITIALIZE), None)


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


def check_draining(messages: Sequence[Message], *, draining: bool, removed: bool = False) -> None:
    """``Draining`` when the replica is ``draining`` and ``messages`` (a POST body, a
    frame, a forwarded POST) hold a request that starts work: ``initialize`` or a new
    call. Responses, notifications and :data:`DRAIN_ACCEPTED` pass; a batch is refused
    whole (nothing of it is taken). ``ServerRemoved`` instead when a reload removed the
    server (it drains the same way, and will not come back)."""
    if not (draining or removed):
        return
    for msg in messages:
        if msg.kind is _REQUEST and msg.method not in DRAIN_ACCEPTED:
            raise ServerRemoved() if removed else Draining()


def check_modern_draining(
    method: str,
    params: dict[str, Any],
    *,
    tasks_enabled: bool,
    draining: bool,
    removed: bool = False,
) -> None:
    """``Draining`` for a 2026-07-28 request that starts work while the replica is
    ``draining`` (:data:`MODERN_DRAIN_REFUSED`, by its route); ``ServerRemoved`` while a
    reload drains the server away."""
    if not (draining or removed):
        return
    if route(method, params, tasks_enabled=tasks_enabled) in MODERN_DRAIN_REFUSED:
        raise ServerRemoved() if removed else Draining()


def admit_post(
    messages: Sequence[Message],
    batch: bool,
    *,
    initialized: bool,
    accepting: bool,
    draining: bool = False,
    removed: bool = False,
) -> PostAdmission:
    """The first decisions on a POST body, in order: initialize alone and once (see
    :func:`check_initialize`; ``initialized``: the connection names a session already),
    then no new session once the proxy stopped ``accepting`` (``SessionNotFound``), then
    no new work while ``draining`` (:func:`check_draining`).

    A POST without ``initialize`` goes to its session; finding that session is the
    transport's (a header on ``/mcp``, the socket's own on ``/ws``)."""
    init = check_initialize(messages, batch, initialized=initialized)
    if init is not None and not accepting:
        raise SessionNotFound("the proxy is shutting down")
    check_draining(messages, draining=draining, removed=removed)
    return PostAdmission(init)


def check_upstream_reading(pending_bytes: int, max_pending_bytes: int) -> None:
    """``Overloaded`` (``upstream_busy``) when the server has more than
    ``max_pending_bytes`` (``upstream.max_pending_bytes``) of unread input."""
    if pending_bytes > max_pending_bytes:
        raise Overloaded(
            "The MCP server is not reading its input; try again later",
            reason="upstream_busy",
        )
