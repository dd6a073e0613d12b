"""The page an operator opens first: ``/status`` (HTML) and ``/status.json`` (the same
snapshot as JSON, for scripts).

:func:`collect` takes a snapshot of the process (upstreams, sessions and their streams,
tasks) as plain JSON values; :func:`render` turns a snapshot, and nothing else, into one
self-contained page (inline CSS, no script, no external asset) that reloads itself.

Nothing on the page lets its reader act as a client: session and task ids are cut to
their first :data:`ID_PREFIX` characters (as in the logs), principals are shown by name,
never by token, and an upstream's target is its command or its URL without credentials,
never a header value.
"""

from __future__ import annotations

import asyncio
import html
import time
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from aiohttp import web

from proxy import __version__
from proxy.core.session_state import STANDALONE
from proxy.core.snapshot import StreamSnapshot
from proxy.downstream.keys import CONTEXT_KEY, ENDPOINTS_KEY, REGISTRY_KEY

if TYPE_CHECKING:
    from proxy.context import ProxyContext
    from proxy.downstream.http import StreamableHttp
    from proxy.modern.endpoint import ModernFacade
    from proxy.registry import Registry
    from proxy.runtime import SessionRunner
    from proxy.servers import Server

REFRESH_SECONDS = 5
ID_PREFIX = 8  # as in the logs: enough to tell sessions apart, too little to take one over
SESSIONS_SHOWN = 500
STOPPED_IDLE = "process stopped (idle)"  # the badge of a session whose process is stopped
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


# The page
def render(snapshot: dict[str, Any]) -> str:
    """The page of one :func:`collect` snapshot: pure, every value escaped."""
    sessions = snapshot.get("sessions") or []
    return (
        _head(snapshot)
        + _upstreams(snapshot.get("upstreams") or [])
        + _sessions(sessions, int(snapshot.get("sessions_total", len(sessions))))
        + _tasks(snapshot.get("tasks") or [], snapshot.get("modern"))
        + "</main></body></html>\n"
    )


def _e(value: Any) -> str:
    return "—" if value is None else html.escape(str(value), quote=True)


def human_bytes(n: Any) -> str:
    if not isinstance(n, int | float):
        return "—"
    if n < 1024:
        return f"{int(n)} B"
    size, unit = float(n) / 1024, "KiB"
    for bigger in ("MiB", "GiB"):
        if size >= 1024:
            size, unit = size / 1024, bigger
    return f"{size:.1f} {unit}"


def human_age(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "—"
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def _badge(state: Any) -> str:
    good = {"ok", "live", "working", "ready"}
    warn = {"completed", "stopping", "input_required", "closed", "paused", STOPPED_IDLE}
    kind = "good" if state in good else "warn" if state in warn else "bad"
    return f'<span class="badge {kind}">{_e(state)}</span>'


def _table(headers: list[str], rows: list[str], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _row(cells: list[str]) -> str:
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _empty(text: str) -> str:
    return f'<p class="empty">{_e(text)}</p>'


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;
color:#1d2329;background:#f5f6f8}
header{background:#1d2329;color:#fff;padding:12px 20px}header h1{font-size:18px;margin:0 0 4px}
header .meta{color:#c9d1d9;font-size:13px}main{padding:12px 20px 24px}
h2{font-size:16px;margin:20px 0 8px}
table{border-collapse:collapse;background:#fff;width:100%;box-shadow:0 1px 2px #0002}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid #e3e6ea;vertical-align:top}
th{background:#eef0f3;font-weight:600;font-size:12px;text-transform:uppercase;color:#57606a}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;word-break:break-all}
.badge{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600}
.good{background:#d1f0da;color:#116329}.warn{background:#fff1c2;color:#7a5300}
.bad{background:#ffd8d3;color:#a40e26}
tr.streams>td{background:#fafbfc;padding:4px 8px 10px 32px}
table.inner{box-shadow:none;font-size:13px}
.empty{color:#57606a;font-style:italic}.error{color:#a40e26}
"""


def _head(snapshot: dict[str, Any]) -> str:
    store = snapshot.get("store") or {}
    store_text = f"store {_e(store.get('kind'))} (epoch {_e(store.get('epoch'))})"
    store_text += " " + _error(store.get("last_error"), "")
    if store.get("history_lost_at"):
        store_text += " " + _error(f"history lost at {store['history_lost_at']}")
    refresh = int(snapshot.get("refresh_seconds", REFRESH_SECONDS))
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="{refresh}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>mcp-resume-proxy status</title><style>{_CSS}</style></head><body>"
        f"<header><h1>mcp-resume-proxy {_e(snapshot.get('version'))} "
        f"{_badge(snapshot.get('status'))}</h1>"
        f'<div class="meta">{store_text} · buffered '
        f"{_e(human_bytes(snapshot.get('buffered_bytes')))} · generated "
        f"{_e(snapshot.get('generated_at'))} · reloads every {refresh} s</div></header><main>"
    )


def _error(text: Any, otherwise: str = "—") -> str:
    return f'<span class="error">{_e(text)}</span>' if text else otherwise


def _upstreams(upstreams: list[dict[str, Any]]) -> str:
    rows = [
        _row(
            [
                f"<strong>{_e(u.get('name'))}</strong>",
                _e(u.get("transport")),
                f"<code>{_e(u.get('target'))}</code>",
                _badge(u.get("state")),
                _e(u.get("restarts")),
                _error(u.get("crash_loop"), "no"),
                _error(u.get("last_error")),
                _e(u.get("sessions")),
                _eras_cell(u.get("eras")),
            ]
        )
        for u in upstreams
    ]
    headers = ["name", "transport", "target", "state", "restarts", "crash loop", "last error"]
    headers += ["sessions", "dual-era clients"]
    table = _table(headers, rows) if rows else _empty("No upstream configured.")
    return f"<h2>Upstreams ({len(upstreams)})</h2>{table}"


def _eras_cell(eras: Any) -> str:
    """The era a dual-era client is served, with what it means for resumption."""
    if not isinstance(eras, dict):
        return "—"
    return f"{_e(eras.get('dual_era'))}: {_e(eras.get('resumption'))}"


def _sessions(sessions: list[dict[str, Any]], total: int) -> str:
    title = f"<h2>Sessions ({total})</h2>"
    if not sessions:
        return title + _empty("No sessions.")
    rows = []
    for s in sessions:
        streams = s.get("streams") or []
        flags = [f for f in ("closed", "paused") if s.get(f)]
        if s.get("stopped_idle"):
            flags.append(STOPPED_IDLE)
        rows.append(
            _row(
                [
                    f"<code>{_e(s.get('id'))}…</code>",
                    _e(s.get("upstream")),
                    _e(s.get("principal")),
                    _e(human_age(s.get("age_seconds"))),
                    _e(s.get("connections")),
                    _e(s.get("streams_total", len(streams))),
                    _e(human_bytes(s.get("buffered_bytes"))) + "".join(_badge(f) for f in flags),
                ]
            )
        )
        rows.append(f'<tr class="streams"><td colspan="7">{_streams_table(s)}</td></tr>')
    headers = ["session", "upstream", "principal", "age", "connections", "streams", "buffered"]
    hidden = total - len(sessions)
    more = _empty(f"… and {hidden} more (the oldest are shown).") if hidden > 0 else ""
    return title + _table(headers, rows) + more


def _streams_table(session: dict[str, Any]) -> str:
    streams = session.get("streams") or []
    if not streams:
        return _empty("No streams.")
    rows = [
        _row(
            [
                _e(st.get("id")) + (" (GET)" if st.get("id") == STANDALONE else ""),
                _badge(st.get("state")),
                "yes" if st.get("attached") else "no",
                _e(human_bytes(st.get("buffered_bytes"))),
                _e(st.get("events")),
                _e(human_age(st.get("age_seconds"))),
            ]
        )
        for st in streams
    ]
    headers = ["stream", "state", "client attached", "buffered", "events", "age"]
    hidden = int(session.get("streams_total", len(streams))) - len(streams)
    more = _empty(f"… and {hidden} older finished streams.") if hidden > 0 else ""
    return _table(headers, rows, "inner") + more


def _tasks(tasks: list[dict[str, Any]], modern: Any) -> str:
    title = f"<h2>Tasks ({len(tasks)})</h2>"
    line = ""
    if isinstance(modern, dict):
        counts = ", ".join(f"{_e(k.replace('_', ' '))} {_e(v)}" for k, v in modern.items())
        line = f'<p class="meta">Modern clients: {counts}.</p>'
    if not tasks:
        return title + line + _empty("No tasks running in this process.")
    rows = [
        _row(
            [
                f"<code>{_e(t.get('id'))}…</code>",
                _e(t.get("upstream")),
                _badge(t.get("status")),
                _e(t.get("principal")),
                _e(human_age(t.get("age_seconds"))),
            ]
        )
        for t in tasks
    ]
    return title + line + _table(["task", "upstream", "status", "principal", "age"], rows)


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
