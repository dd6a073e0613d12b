"""Request ids at the session boundary: each side's ids are its own (DESIGN.md §5 rule 5).

Client request ids are rewritten to session-unique integer upstream ids; server→client
request ids to session-unique integer downstream ids. Replies are mapped back, so a reply
may arrive on any connection of the session, and the proxy can later issue upstream
requests of its own without colliding with a client's ids.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from proxy.core.record import record


@record
class PendingRequest:
    """A client request forwarded upstream and not yet answered."""

    client_id: Any
    stream: int
    method: str
    progress_token: str | int | None


def _plain_int(value: Any) -> bool:
    """An int that is not a bool (``True == 1``): JSON gives exact types, so ``type`` does."""
    return type(value) is int


def progress_token_of(params: dict[str, Any]) -> str | int | None:
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, str) or _plain_int(token) else None


class IdMap:
    """Both directions' id maps, and which stream each in-flight request belongs to."""

    def __init__(self) -> None:
        self._pending: dict[int, PendingRequest] = {}  # upstream id → client request
        self._progress: dict[str | int, int] = {}  # progressToken → stream number
        self._server: dict[int, Any] = {}  # downstream id → the server's own id
        self._next_upstream = 1
        self._next_downstream = 1

    def __len__(self) -> int:
        """How many client requests are in flight."""
        return len(self._pending)

    # --------------------------------------------------------- client → server requests
    def add_client_request(
        self, client_id: Any, method: str, stream: int, token: str | int | None
    ) -> int:
        """Record a client request; return the upstream id to forward it with."""
        upstream_id = self._next_upstream
        self._next_upstream += 1
        self._pending[upstream_id] = PendingRequest(client_id, stream, method, token)
        if token is not None:
            self._progress[token] = stream
        return upstream_id

    def own_progress_token(self, upstream_id: int) -> int:
        """Progress of this request will carry its upstream id as its token (a pooled
        session serves many clients, whose own tokens may collide): record it so."""
        pending = self._pending[upstream_id]
        self._pending[upstream_id] = replace(pending, progress_token=upstream_id)
        self._progress[upstream_id] = pending.stream
        return upstream_id

    def pending(self, upstream_id: Any) -> PendingRequest | None:
        return self._pending.get(upstream_id) if _plain_int(upstream_id) else None

    def finish(self, upstream_id: int) -> PendingRequest:
        """Forget an answered (or abandoned) request and its progress token."""
        pending = self._pending.pop(upstream_id)
        if pending.progress_token is not None:
            self._progress.pop(pending.progress_token, None)
        return pending

    def upstream_id_of(self, client_id: Any) -> int | None:
        """The newest in-flight request with that client id (same value and type)."""
        for upstream_id in sorted(self._pending, reverse=True):
            known = self._pending[upstream_id].client_id
            if known == client_id and type(known) is type(client_id):
                return upstream_id
        return None

    def in_flight(self) -> list[int]:
        """Upstream ids of every request awaiting its response, oldest first."""
        return sorted(self._pending)

    def only_stream_in_flight(self) -> int | None:
        """The stream of the one request in flight, if exactly one is (routing rule 4)."""
        if len(self._pending) == 1:
            return next(iter(self._pending.values())).stream
        return None

    def stream_of_progress(self, token: Any) -> int | None:
        kind = type(token)
        return self._progress.get(token) if kind is int or kind is str else None

    # --------------------------------------------------------- server → client requests
    def add_server_request(self, server_id: Any) -> int:
        """Record a server→client request; return the downstream id to send it with."""
        downstream_id = self._next_downstream
        self._next_downstream += 1
        self._server[downstream_id] = server_id
        return downstream_id

    def take_server_request(self, downstream_id: Any) -> tuple[bool, Any]:
        """The server's id for a client's reply, and forget it; (False, None) if unknown."""
        if _plain_int(downstream_id) and downstream_id in self._server:
            return True, self._server.pop(downstream_id)
        return False, None

    def cancel_server_request(self, server_id: Any) -> int | None:
        """The downstream id of the server request the server now cancels, forgotten."""
        for downstream_id, known in self._server.items():
            if known == server_id and type(known) is type(server_id):
                del self._server[downstream_id]
                return downstream_id
        return None

    def drop_server_requests(self) -> None:
        self._server.clear()
