"""``/status`` and ``/status.json`` (proxy/downstream/status.py and status_html.py) on a
real proxy: what they show of live sessions, streams and tasks, that the page is
self-contained and escapes everything, that it is behind auth, and that headless Chromium
renders it (the screenshot is kept in ``test-artifacts/status.png``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.core.sse import SSEDecoder
from proxy.downstream.status import safe_target
from proxy.downstream.status_html import render
from tests.downstream.sse_client import RawSession
from tests.modern.client import TASKS, Modern
from tests.modern.support import SERVER
from tests.support import DEADLINE_S, ROOT, RunningProxy, bearer, eventually, run_proxy, tool_call

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_S = 90.0  # one page load and a screenshot; generous for a busy machine
ARTIFACTS = ROOT / "test-artifacts"
ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef00"
AUTH = {"tokens": [{"token": ALICE, "principal": "alice"}, {"token": BOB, "principal": "bob"}]}
HOSTILE = '<script>alert("x")</script>"><img src=x onerror=alert(1)>'


@dataclass
class Scene:
    proxy: RunningProxy
    http: aiohttp.ClientSession
    idle: str  # the full id of a session with no request in flight
    busy: str  # ... and of one whose tools/call waits for an answer on an open stream
    started: float  # time.monotonic() before the sessions were opened


@contextlib.asynccontextmanager
async def scene(
    tmp_path: Path, headers: dict[str, str] | None = None, **sections: Any
) -> AsyncIterator[Scene]:
    """A proxy (``sections`` of its config) in front of the task fixture server with two
    sessions, one holding an open stream (a ``tools/call`` of ``ask``, waiting for the
    client's answer), and a modern task running (``wait`` 60 s). ``headers`` go with
    every request."""
    started = time.monotonic()
    async with (
        run_proxy(tmp_path, SERVER, tasks={"mode": "always"}, **sections) as proxy,
        aiohttp.ClientSession(headers=headers) as http,
    ):
        idle = RawSession(http, proxy.url)
        await idle.initialize()
        busy = RawSession(http, proxy.url)
        await busy.initialize()
        call = await http.post(
            proxy.url, json=tool_call(7, "ask", {"question": "?"}), headers=busy.headers()
        )
        try:
            assert call.status == 200, await call.text()
            decoder = SSEDecoder()
            async with asyncio.timeout(DEADLINE_S):
                async for chunk in call.content.iter_any():  # until the question arrives
                    if any("elicitation/create" in e.data for e in decoder.feed(chunk)):
                        break
            task = await Modern(http, proxy.url, caps=TASKS).call("wait", {"seconds": 60})
            assert task.result["resultType"] == "task", task
            yield Scene(proxy, http, idle.session_id, busy.session_id, started)
        finally:
            call.close()


async def get_json(scene: Scene, **headers: str) -> dict[str, Any]:
    async with scene.http.get(scene.proxy.base + "/status.json", headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers["Cache-Control"] == "no-store"
        text = await resp.text()
    assert scene.idle not in text and scene.busy not in text, "a whole session id is shown"
    body: dict[str, Any] = json.loads(text)
    return body


def check_age(age: Any, scene: Scene) -> None:
    """An age is a number of seconds since the scene began, or None where none is known."""
    if age is not None:
        assert 0 <= age <= time.monotonic() - scene.started + 1, age


async def settled(s: Scene) -> dict[str, Any] | None:
    """The snapshot once the idle session's last response is written out (the handler lets
    its connection go just after the client read its end)."""
    body = await get_json(s)
    connections = {entry["id"]: entry["connections"] for entry in body["sessions"]}
    return body if connections == {s.idle[:8]: 0, s.busy[:8]: 1} else None


async def test_status_json_shows_upstreams_sessions_streams_and_tasks(tmp_path: Path) -> None:
    async with scene(tmp_path) as s:
        body = await eventually(lambda: settled(s), what="one open connection, the call's")
        assert body["status"] == "ok" and body["version"]
        assert body["store"]["kind"] == "memory" and body["store"]["last_error"] is None
        [upstream] = body["upstreams"]
        assert upstream["name"] == "default" and upstream["transport"] == "stdio"
        assert upstream["target"].endswith("task_server.py")
        assert upstream["state"] == "ok" and upstream["last_error"] is None
        assert upstream["restarts"] == 0 and upstream["crash_loop"] is None
        assert upstream["sessions"] == 2
        sessions = {entry["id"]: entry for entry in body["sessions"]}
        assert set(sessions) == {s.idle[:8], s.busy[:8]}
        for entry in sessions.values():
            assert entry["upstream"] == "default" and entry["principal"] is None
            check_age(entry["age_seconds"], s)
            assert entry["buffered_bytes"] == sum(st["buffered_bytes"] for st in entry["streams"])
            assert 0 in [st["id"] for st in entry["streams"]]  # the standalone (GET) stream
            for stream in entry["streams"]:
                assert stream["state"] in ("live", "completed")
                check_age(stream["age_seconds"], s)
        busy = sessions[s.busy[:8]]
        [open_stream] = [st for st in busy["streams"] if st["id"] != 0 and st["attached"]]
        assert open_stream["state"] == "live" and open_stream["events"] >= 1
        assert open_stream["buffered_bytes"] > 0
        assert body["buffered_bytes"] >= sum(e["buffered_bytes"] for e in sessions.values())
        [task] = body["tasks"]
        assert task["status"] == "working" and len(task["id"]) == 8
        assert task["upstream"] == "default"
        check_age(task["age_seconds"], s)
        assert body["modern"]["tasks_running"] == 1


async def test_the_page_is_self_contained_and_behind_the_host_check(tmp_path: Path) -> None:
    async with scene(tmp_path) as s:
        url = s.proxy.base + "/status"
        async with s.http.get(url) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == "text/html; charset=utf-8"
            assert resp.headers["Cache-Control"] == "no-store"
            assert "default-src 'none'" in resp.headers["Content-Security-Policy"]
            page = await resp.text()
        assert page.startswith("<!DOCTYPE html>")
        assert '<meta http-equiv="refresh" content="5">' in page
        # Nothing is loaded from anywhere: no src/href at all, no script, no stylesheet link.
        assert not re.search(r"\b(src|href|srcset|action)\s*=", page, re.IGNORECASE), page
        for needle in ("<script", "<link", "<iframe", "@import", "url("):
            assert needle not in page.lower(), needle
        assert s.idle[:8] in page and s.busy[:8] in page
        assert s.idle not in page and s.busy not in page
        assert "Sessions (2)" in page and "Tasks (1)" in page
        async with s.http.get(url, headers={"Host": "evil.example"}) as resp:
            assert resp.status == 421
        async with s.http.get(url + ".json", headers={"Origin": "http://evil.example"}) as resp:
            assert resp.status == 403


def hostile_snapshot() -> dict[str, Any]:
    return {
        "version": HOSTILE,
        "status": HOSTILE,
        "generated_at": HOSTILE,
        "store": {"kind": HOSTILE, "epoch": HOSTILE, "last_error": HOSTILE, "history_lost_at": 1},
        "buffered_bytes": 5 * 1024 * 1024,
        "upstreams": [
            {
                "name": HOSTILE,
                "transport": HOSTILE,
                "target": HOSTILE,
                "state": HOSTILE,
                "last_error": HOSTILE,
                "restarts": HOSTILE,
                "crash_loop": HOSTILE,
                "sessions": HOSTILE,
            }
        ],
        "sessions_total": 1,
        "sessions": [
            {
                "id": HOSTILE,
                "upstream": HOSTILE,
                "principal": HOSTILE,
                "age_seconds": 3725,
                "connections": HOSTILE,
                "buffered_bytes": 1536,
                "streams_total": 1,
                "streams": [{"id": HOSTILE, "state": HOSTILE, "events": HOSTILE}],
            }
        ],
        "modern": {HOSTILE: HOSTILE},
        "tasks": [{"id": HOSTILE, "status": HOSTILE, "principal": HOSTILE, "upstream": HOSTILE}],
    }


def test_render_escapes_everything_it_is_given() -> None:
    page = render(hostile_snapshot())
    assert "<script" not in page and "<img" not in page and 'alert("x")' not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "1 h 2 min" in page and "1.5 KiB" in page and "5.0 MiB" in page


def test_render_says_when_there_is_nothing() -> None:
    page = render({"version": "1", "status": "ok", "upstreams": [], "sessions": [], "tasks": []})
    assert "No sessions." in page and "No tasks running in this process." in page
    assert "No upstream configured." in page


def test_an_upstream_url_is_shown_without_its_credentials() -> None:
    shown = safe_target("https://user:secret@mcp.example:8443/mcp?key=secret2&x", [])
    assert shown == "https://mcp.example:8443/mcp?key=…&x=…"
    assert safe_target(None, ["python", "server.py"]) == "python server.py"


async def test_status_needs_the_bearer_token_and_shows_principals_only(tmp_path: Path) -> None:
    async with scene(tmp_path, bearer(ALICE), auth=AUTH) as s:
        for path in ("/status", "/status.json"):
            for headers in ({"Authorization": ""}, bearer("wrong-token-0123456789")):
                async with s.http.get(s.proxy.base + path, headers=headers) as resp:
                    assert resp.status == 401, (path, headers)
            async with s.http.get(s.proxy.base + path, headers=bearer(BOB)) as resp:
                assert resp.status == 200, path
                text = await resp.text()
            assert "alice" in text
            assert ALICE not in text and BOB not in text
        body = await get_json(s)
        assert {entry["principal"] for entry in body["sessions"]} == {"alice"}
        assert [task["principal"] for task in body["tasks"]] == ["alice"]


# --------------------------------------------------------------------------- Chromium
def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()  # state, ppid, pgrp, ...
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


async def chromium(tmp_path: Path, *args: str) -> bytes:
    """Run headless Chromium on ``args`` in a process group of its own and a throwaway
    profile; return its stdout. Whatever it leaves behind is killed with the group."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: run scripts/install-chromium.sh (Debian chromium)")
    profile = tmp_path / "chromium-profile"
    proc = await asyncio.create_subprocess_exec(
        str(CHROMIUM),
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group: killed as one below
        env={**os.environ, "HOME": str(tmp_path)},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), CHROMIUM_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc.returncode is None:
            await proc.wait()
        await eventually(lambda: not group_members(proc.pid), what="chromium to be gone")
    assert proc.returncode == 0, f"chromium exited {proc.returncode}:\n{err.decode()[-3000:]}"
    return out


async def test_chromium_renders_the_page_and_a_screenshot_is_kept(tmp_path: Path) -> None:
    async with scene(tmp_path) as s:
        url = s.proxy.base + "/status"
        dom = (await chromium(tmp_path, "--dump-dom", url)).decode()
        shot = tmp_path / "status.png"
        await chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,900", url)
    assert "<h1>mcp-resume-proxy" in dom, dom[:2000]
    assert "default" in dom and s.idle[:8] in dom and s.busy[:8] in dom
    assert "Sessions (2)" in dom and "Tasks (1)" in dom
    assert shot.exists(), "chromium wrote no screenshot"
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000, len(data)
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / "status.png")
