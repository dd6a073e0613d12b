"""The keys under which the aiohttp application holds its parts, for the handlers that
need them (a module of its own: the app imports the handlers, the handlers these keys)."""

from __future__ import annotations

from aiohttp import web

from proxy.context import ProxyContext
from proxy.downstream.auth import Authenticator
from proxy.downstream.guard import BodyBudget
from proxy.downstream.http import StreamableHttp
from proxy.downstream.websocket import WebSocketEndpoint
from proxy.readiness import Readiness
from proxy.registry import Registry

CONTEXT_KEY = web.AppKey("context", ProxyContext)
REGISTRY_KEY = web.AppKey("registry", Registry)
ENDPOINTS_KEY = web.AppKey("endpoints", dict[str, StreamableHttp])  # by server name
READINESS_KEY = web.AppKey("readiness", Readiness)
AUTH_KEY = web.AppKey("auth", Authenticator)
SOCKETS_KEY = web.AppKey("sockets", dict[str, WebSocketEndpoint])  # by server name
BODIES_KEY = web.AppKey("bodies", BodyBudget)  # POST bodies being read, every endpoint's
