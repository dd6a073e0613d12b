"""The page an operator opens first: ``/status`` (HTML) and ``/status.json`` (the same
snapshot as JSON, for scripts).

:func:`collect` takes a snapshot of the process (upstreams, sessions and their streams,
tasks) as plain JSON values; :func:`proxy.downstream.status_html.render` turns a snapshot,
and nothing else, into one self-contained page (inline CSS, no script, no external asset)
that reloads itself.

Nothing on the page lets its reader act as a client: session and task ids are cut to
their first :data:`ID_PREFIX` characters (as in the logs), principals are shown by name,
never by token, and an upstream's target is its command or its URL without credentials,
never a header value.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from aiohttp import web

from proxy import __version__
from proxy.core.snapshot import StreamSnapshot
from proxy.downstream.keys import CONTEXT_KEY, ENDPOINTS_KEY, REGISTRY_KEY
from proxy.downstream.status_html import REFRESH_SECONDS, render

if TYPE_CHECKING:
    from proxy.context import ProxyContext
    from proxy.downstream.http import StreamableHttp
    from proxy.modern.endpoint import ModernFacade
    from proxy.registry import Registry
    from proxy.runtime import SessionRunner
    from proxy.servers import Server

ID_PREFIX = 8  # as in the logs: enough to tell sessions apart, too little to take one over
SESSIONS_SHOWN = 500
STREAMS_SHOWN = 20  # per session: the standalone and live ones first, then the newest


# What this page reads of objects it does not own: every such read is here, so that a
# change of those objects is met in one place.
def _parts(
    app: web.Application,
) -> tuple[ProxyContext, Registry, dict[str, StreamableHttp]]:
    """The app's context, its session registry and its endpoints by server name."""
    return app[CONTEXT_KEY], app[REGISTRY_KEY], app[ENDPOINTS_KEY]


def _servers(context: ProxyContext) -> list[Server]:
    return list(context.servers.values())


def _server_health(server: Server) -> dict[str, Any]:  # state, last_error, restarts, ...
    return dict(server.health_dict())


def _server_eras(server: Server) -> dict[str, str]:  # dual_era, resumption
    return dict(server.eras())


def _modern_of(endpoints: dict[str, StreamableHttp], name: str) -> ModernFacade | None:
    endpoint = endpoints.get(name)
    return endpoint.modern if endpoint is not None else None


def _target(server: Server) -> str:
    return safe_target(server.upstream.url, server.upstream.command)


def _runners(registry: Registry) -> list[SessionRunner]:
    return list(registry.sessions())


def _server_name(runner: SessionRunner) -> str:
    return runner.server.name


def _running_tasks(modern: ModernFacade) -> Iterable[tuple[str, dict[str, Any]]]:
    """(task id, record) of the tasks this process runs (proxy/modern/tasks.py)."""
    keeper = modern.tasks
    for task_id in list(keeper.calls):
        record = keeper.records.get(task_id)
        if record is not None:
            yield task_id, record


# The snapshot (JSON values only)
def collect(app: web.Application) -> dict[str, Any]:
    """The process right now, as JSON values (see docs/status.md for the shape). Taken
    without an ``await``, so it is one consistent moment."""
    context, registry, endpoints = _parts(app)
    now = asyncio.get_running_loop().time()
    wall = time.time()
    upstreams = [_upstream_entry(s, _modern_of(endpoints, s.name)) for s in _servers(context)]
    moderns = [u["modern"] for u in upstreams if u["modern"] is not None]
    runners = _runners(registry)
    tasks = [
        _task_entry(task_id, record, server.name, wall)
        for server in _servers(context)
        if (modern := _modern_of(endpoints, server.name)) is not None
        for task_id, record in _running_tasks(modern)
    ]
    return {
        "version": __version__,
        "status": "ok" if context.accepting else "stopping",
        "generated_at": datetime.fromtimestamp(wall, UTC).isoformat(timespec="seconds"),
        "refresh_seconds": REFRESH_SECONDS,
        "store": context.store_health(),
        "buffered_bytes": context.budget.used,
        "upstreams": upstreams,
        "sessions_total": len(runners),
        "sessions": [_session_entry(r, now) for r in runners[:SESSIONS_SHOWN]],
        "modern": _summed(moderns) if moderns else None,  # every upstream's together
        "tasks": tasks,
        "reload": _reload_entry(context.last_reload),
    }


def _reload_entry(last: dict[str, Any] | None) -> dict[str, Any] | None:
    """The last config reload (proxy/reload.py): outcome, trigger, time, what changed or
    why it was refused (key paths, never values). None: no reload since start."""
    if last is None:
        return None
    at = datetime.fromtimestamp(last["at"], UTC).isoformat(timespec="seconds")
    return {**last, "at": at}


def _upstream_entry(server: Server, modern: ModernFacade | None) -> dict[str, Any]:
    health = _server_health(server)
    entry = {"name": server.name, "transport": health["transport"], "target": _target(server)}
    modern_health = modern.health() if modern is not None else None
    return {
        **entry,
        **health,
        "modern": modern_health,
        "eras": _server_eras(server),
        "removed": server.removed,
    }


def _session_entry(runner: SessionRunner, now: float) -> dict[str, Any]:
    snapshot = runner.session.snapshot()
    streams = list(snapshot.streams)
    return {
        "id": runner.session_id[:ID_PREFIX],
        "upstream": _server_name(runner),
        "principal": runner.principal,
        "age_seconds": _age(now, snapshot.created_at),
        "connections": runner.open_connections,
        "closed": snapshot.closed,  # the upstream is gone; finished streams stay resumable
        "paused": snapshot.paused,  # overflow: block holds the server back
        # upstream.stop_idle_seconds: its process is stopped; its next request starts it
        "stopped_idle": snapshot.upstream_stopped,
        "upstream_pid": runner.upstream.pid,  # stdio: its server process, while one runs
        "buffered_bytes": snapshot.buffered_bytes,
        "streams_total": len(streams),
        "streams": [_stream_entry(s, now) for s in _shown(streams)],
    }


def _shown(streams: list[StreamSnapshot]) -> list[StreamSnapshot]:
    """At most :data:`STREAMS_SHOWN`: the standalone and the live ones first, then the
    newest finished ones; in stream order."""
    if len(streams) <= STREAMS_SHOWN:
        return streams
    first = [s for s in streams if s.standalone or s.live]
    firsts = {s.number for s in first}
    rest = [s for s in streams if s.number not in firsts]
    kept = (first + rest[::-1])[:STREAMS_SHOWN]
    return sorted(kept, key=lambda s: s.number)


def _stream_entry(stream: StreamSnapshot, now: float) -> dict[str, Any]:
    return {
        "id": stream.number,
        "state": stream.state,
        "attached": stream.attached,
        "buffered_bytes": stream.buffered_bytes,
        "events": stream.events,
        "age_seconds": _age(now, stream.created_at),
    }


def _task_entry(task_id: str, record: dict[str, Any], upstream: str, wall: float) -> dict[str, Any]:
    try:  # an ISO 8601 time (proxy/core/taskrecord.py)
        born: float | None = datetime.fromisoformat(record["createdAt"]).timestamp()
    except (KeyError, TypeError, ValueError):
        born = None
    return {
        "id": task_id[:ID_PREFIX],
        "upstream": upstream,
        "status": record.get("status"),
        "principal": record.get("principal"),
        "age_seconds": _age(wall, born),
    }


def _age(now: float, born: float | None) -> float | None:
    return None if born is None else round(max(0.0, now - born), 1)


def _summed(healths: list[dict[str, Any]]) -> dict[str, Any]:
    total: Counter[str] = Counter()
    for health in healths:
        total.update(health)
    return dict(total)


def safe_target(url: str | None, command: list[str]) -> str:
    """An upstream as the page shows it: its command line, or its URL without user
    information and with query values hidden (either may hold a credential)."""
    if not url:
        return " ".join(command)
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "(unparsable URL)"
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    query = "&".join(f"{p.partition('=')[0]}=…" for p in parts.query.split("&") if p)
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


# The routes (behind the Host/Origin check and the auth middleware, as /metrics)
_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


async def status_page(request: web.Request) -> web.Response:
    """``GET /status``: the page (text/html)."""
    page = render(collect(request.app))
    return web.Response(text=page, content_type="text/html", charset="utf-8", headers=_HEADERS)


async def status_json(request: web.Request) -> web.Response:
    """``GET /status.json``: the snapshot the page is made of."""
    return web.json_response(collect(request.app), headers={"Cache-Control": "no-store"})
