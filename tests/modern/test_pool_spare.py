"""The modern pool's warm spare (``modern.pool.spare``, docs/modern.md §The pool): a call
finds an initialized session instead of waiting for a server to start.

What is asserted is read from the proxy itself, never from a clock: the order of its log
lines (``upstream_started``, ``pool_session_started``) and the ``/healthz`` counter of
requests that waited for a start (``modern.pool_start_waits``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from tests.modern.client import Modern
from tests.modern.support import modern_proxy
from tests.support import RunningProxy, alive, eventually


async def _modern_health(client: Modern, proxy: RunningProxy) -> dict[str, Any]:
    async with client.http.get(proxy.base + "/healthz") as resp:
        block: dict[str, Any] = (await resp.json())["modern"]
        return block


def _events(proxy: RunningProxy) -> list[dict[str, Any]]:
    """The proxy's JSON log lines, in order."""
    out = []
    for line in proxy.log_text().splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


async def _pid(client: Modern, tool: str, arguments: dict[str, Any] | None = None) -> str:
    answer = await client.call(tool, arguments)
    return str(answer.result["content"][0]["text"])


async def test_two_concurrent_calls_on_a_fresh_proxy_do_not_wait_for_each_others_start(
    tmp_path: Path,
) -> None:
    async with modern_proxy(tmp_path) as (proxy, client, _log):
        # Fresh: the first call must wait for a server; the spare starts beside it, not
        # after it (both processes are spawned before the first is initialized).
        first = asyncio.ensure_future(client.call("wait", {"seconds": 30, "label": "a"}))
        await eventually(
            lambda: len([e for e in _events(proxy) if e["event"] == "pool_session_started"]) >= 2,
            what="the first session and the spare started",
        )
        events = [e["event"] for e in _events(proxy)]
        first_up = events.index("pool_session_started")
        assert events[:first_up].count("upstream_started") == 2, events

        # A second call while the first runs takes the spare: it waits for no start.
        health = await _modern_health(client, proxy)
        waits = health["pool_start_waits"]
        second = await _pid(client, "whoami")
        health = await _modern_health(client, proxy)
        assert health["pool_start_waits"] == waits
        assert health["calls"] == 1  # the first is still running: the two were concurrent

        # The spare taken is replaced (3 sessions: the busy one, the used spare, a new one),
        # and the next concurrent call takes an idle one without waiting either.
        await eventually(
            lambda: _pool_idle_at_least(client, proxy, 2), what="two idle sessions besides"
        )
        third = await _pid(client, "whoami")
        health = await _modern_health(client, proxy)
        assert health["pool_start_waits"] == waits
        assert health["pool_sessions"] == 3
        assert third == second  # idle sessions are reused: nothing started for it
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
    # The spares end with the pool: no server process outlives the proxy.
    pids = proxy.upstream_pids()
    assert len(pids) == 3
    await eventually(lambda: not any(alive(pid) for pid in pids), what="servers stopped")


async def _pool_idle_at_least(client: Modern, proxy: RunningProxy, count: int) -> bool:
    return bool((await _modern_health(client, proxy))["pool_idle"] >= count)


async def test_spare_zero_starts_none(tmp_path: Path) -> None:
    """``spare: 0`` is the pool without spares: one server for one call. (That a spare counts
    against ``size`` is :func:`proxy.core.pooling.spares_to_start`'s, tests/core.)"""
    async with modern_proxy(tmp_path, modern={"pool": {"spare": 0}}) as (proxy, client, _log):
        await _pid(client, "whoami")
        assert (await _modern_health(client, proxy))["pool_sessions"] == 1
        assert len(proxy.upstream_pids()) == 1


async def test_per_request_takes_a_fresh_spare(tmp_path: Path) -> None:
    """With ``per_request`` the spare is a session no request has used: each request still
    gets its own server, but the second one does not wait for it to start."""
    async with modern_proxy(tmp_path, modern={"pool": {"isolation": "per_request"}}) as (
        proxy,
        client,
        _log,
    ):
        first = await _pid(client, "whoami")
        await eventually(lambda: _pool_idle_at_least(client, proxy, 1), what="a spare ready")
        waits = (await _modern_health(client, proxy))["pool_start_waits"]
        second = await _pid(client, "whoami")
        assert second != first
        assert (await _modern_health(client, proxy))["pool_start_waits"] == waits
        await eventually(lambda: not alive(int(first)), what="the first request's server stopped")
