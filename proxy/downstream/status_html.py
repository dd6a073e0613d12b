"""The ``/status`` page of one snapshot (:func:`proxy.downstream.status.collect`): pure
HTML, every value escaped, one self-contained page (inline CSS, no script, no external
asset) that reloads itself every :data:`REFRESH_SECONDS`.
"""

from __future__ import annotations

import html
from typing import Any

from proxy.core.session_state import STANDALONE

REFRESH_SECONDS = 5
STOPPED_IDLE = "process stopped (idle)"  # the badge of a session whose process is stopped


def render(snapshot: dict[str, Any]) -> str:
    """The page of one :func:`~proxy.downstream.status.collect` snapshot: pure, every value
    escaped."""
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
