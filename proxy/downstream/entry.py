"""How every request to a client endpoint (``/mcp``, ``/ws``) begins: one decorator.

:func:`endpoint_entry` wraps an endpoint's handler so that

- every line logged while serving the request names the server and the principal
  (structlog context ``upstream`` / ``principal``);
- ``Host`` and ``Origin`` are checked first (2025-11-25 transports §Security Warning:
  servers MUST validate ``Origin`` and SHOULD bind to localhost, DNS-rebinding defence;
  :mod:`proxy.core.httprules`), and a refusal goes to the endpoint's own
  :meth:`Endpoint.refuse`, which writes its wire form;
- a store error no path waited for still becomes a documented refusal (503
  ``store_unavailable``, :mod:`proxy.store.unavailable`), never an HTTP 500.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from aiohttp import web
from structlog.contextvars import bind_contextvars, reset_contextvars

from proxy.config import Config
from proxy.core import httprules
from proxy.core.errors import ProxyError
from proxy.downstream.auth import principal_of
from proxy.servers import Server
from proxy.store.base import StoreError
from proxy.store.unavailable import unavailable


class Endpoint(Protocol):
    """What :func:`endpoint_entry` needs of the endpoint it wraps."""

    @property
    def server(self) -> Server: ...

    @property
    def config(self) -> Config: ...

    async def refuse(self, request: web.Request, exc: ProxyError) -> web.StreamResponse:
        """The wire form of a refusal of ``request`` (logged as the endpoint logs it)."""
        ...


E = TypeVar("E", bound=Endpoint)
Handler = Callable[[E, web.Request], Awaitable[web.StreamResponse]]


def endpoint_entry(serve: Handler[E]) -> Handler[E]:
    """``serve`` with the structlog context bound and ``Host`` / ``Origin`` checked first."""

    @functools.wraps(serve)
    async def handle(self: E, request: web.Request) -> web.StreamResponse:
        # Bound, then reset to what was there before (structlog's bound_contextvars
        # does the same but copies the whole context first: per request, that shows).
        tokens = bind_contextvars(upstream=self.server.name, principal=principal_of(request))
        try:
            listen = self.config.listen
            headers = request.headers
            try:
                httprules.check_host(headers.get("Host"), listen.allowed_hosts)
                httprules.check_origin(headers.get("Origin"), listen.allowed_origins)
            except ProxyError as exc:
                return await self.refuse(request, exc)
            try:
                return await serve(self, request)
            except StoreError as exc:
                return await self.refuse(request, unavailable("serve the request", exc))
        finally:
            reset_contextvars(**tokens)

    return handle
