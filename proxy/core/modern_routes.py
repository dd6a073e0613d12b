"""Which part of the modern façade serves a 2026-07-28 request, by its method: pure.

``server/discover`` is answered from the upstream's ``InitializeResult``; ``tasks/*`` (when
tasks are enabled) from the task records; ``subscriptions/listen`` opens a listen stream;
requests that may ask the client (MRTR) start a call, or continue one when they carry a
``requestState``; lists and completion are forwarded as calls; anything else is ``-32601``
(``basic/transports/streamable-http.mdx``: 404 for an unknown method).
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from proxy.core.call import ASKING

FORWARDED = frozenset(
    {
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "completion/complete",
    }
)
TASK_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})


class Route(Enum):
    DISCOVER = "discover"
    TASK = "task"
    LISTEN = "listen"
    START = "start"  # a new call on a pooled session
    RETRY = "retry"  # an MRTR retry: continue the parked call its requestState names
    NOT_FOUND = "not_found"


def route(method: str, params: dict[str, Any], *, tasks_enabled: bool) -> Route:
    if method == "server/discover":
        return Route.DISCOVER
    if method in TASK_METHODS and tasks_enabled:
        return Route.TASK
    if method == "subscriptions/listen":
        return Route.LISTEN
    if method in ASKING:
        return Route.START if params.get("requestState") is None else Route.RETRY
    if method in FORWARDED:
        return Route.START
    return Route.NOT_FOUND
