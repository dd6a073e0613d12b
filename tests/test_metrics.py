"""``/metrics`` after a scripted scenario: the values are what happened, in Prometheus
text format, and no label carries a session, stream or task id."""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from proxy import __version__
from tests.downstream.sse_client import RawSession
from tests.modern.client import TASKS, Modern
from tests.modern.support import SERVER
from tests.support import eventually, run_proxy, tool_call


async def scrape(
    http: aiohttp.ClientSession, base: str
) -> dict[tuple[str, tuple[Any, ...]], float]:
    async with http.get(base + "/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = await resp.text()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[tuple[str, tuple[Any, ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_after_a_scripted_scenario(tmp_path: Path) -> None:
    async with (
        run_proxy(tmp_path, SERVER, tasks={"mode": "always"}) as proxy,
        aiohttp.ClientSession() as http,
    ):
        p = "mcp_resume_proxy_"
        before = await scrape(http, proxy.base)
        assert value(before, p + "sessions", upstream="default") == 0
        # A legacy session: one call, cut after its first event, resumed with GET.
        legacy = RawSession(http, proxy.url)
        await legacy.initialize()
        call = tool_call(5, "progress", {"steps": 5}, "tok")
        resp = await http.post(proxy.url, json=call, headers=legacy.headers())
        last_id = None
        async for line in resp.content:
            if line.startswith(b"id: "):
                last_id = line[4:].strip().decode()
            if line.startswith(b"data: ") and line[6:].strip() and last_id:
                break
        resp.close()
        assert last_id is not None
        async with http.get(
            proxy.url, headers=legacy.headers(**{"Last-Event-ID": last_id})
        ) as resumed:
            assert resumed.status == 200
            rest = [
                json.loads(line[6:])
                for line in (await resumed.read()).splitlines()
                if line.startswith(b"data: ") and line[6:].strip()
            ]
        assert rest[-1]["id"] == 5
        async with http.get(
            proxy.url, headers=legacy.headers(**{"Last-Event-ID": "not-an-id"})
        ) as refused:
            assert refused.status == 400
        # A modern client: two plain calls and one task.
        modern = Modern(http, proxy.url, caps={})
        for _ in range(2):
            assert (await modern.call("wait", {"seconds": 0})).result["resultType"] == "complete"
        task = (await modern.call("wait", {"seconds": 0}, caps=TASKS)).result
        assert task["resultType"] == "task"
        with_tasks = Modern(http, proxy.url, caps=TASKS)

        async def completed() -> bool:
            got = await with_tasks.task("tasks/get", task["taskId"])
            return bool(got.result["status"] == "completed")

        await eventually(completed, what="the task to complete")
        after = await scrape(http, proxy.base)
        async with http.get(proxy.base + "/metrics") as resp:
            text = await resp.text()
    # No _created series (their start times say nothing process_start_time_seconds does not).
    assert "_created" not in text, [line for line in text.splitlines() if "_created" in line]
    # The process's own series, on the registry the proxy serves, and its build.
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds"):
        assert value(after, name) > 0, name
    assert value(after, "process_start_time_seconds") > 0
    (build,) = [labels for (name, labels) in after if name == p + "build_info"]
    assert dict(build) == {"version": __version__, "python": platform.python_version()}
    assert value(after, p + "build_info", **dict(build)) == 1
    assert value(after, p + "sessions", upstream="default") == 1
    assert value(after, p + "upstream_starts_total", upstream="default", **{"for": "session"}) == 1
    assert value(after, p + "upstream_starts_total", upstream="default", **{"for": "pool"}) >= 1
    assert value(after, p + "resumes_total", outcome="resumed") == 1
    assert value(after, p + "resumes_total", outcome="malformed_event_id") == 1
    assert value(after, p + "replay_events_count") == 1
    assert value(after, p + "replay_events_sum") >= 1
    assert value(after, p + "replay_seconds_count") == 1
    assert value(after, p + "buffered_events") > 0
    assert value(after, p + "buffered_bytes") > 0
    legacy_calls = value(
        after, p + "request_duration_seconds_count", method="tools/call", era="legacy"
    )
    assert legacy_calls == 1
    modern_calls = value(
        after, p + "request_duration_seconds_count", method="tools/call", era="modern"
    )
    assert modern_calls == 3
    assert value(after, p + "tasks_ended_total", status="completed") == 1
    assert value(after, p + "tasks_running", upstream="default") == 0
    assert value(after, p + "modern_calls", upstream="default") == 0
    # Bounded labels only: no session id, stream or task id anywhere.
    labels = {str(v) for (_, pairs) in after for (_, v) in pairs}
    assert legacy.session_id not in labels and task["taskId"] not in labels
    assert not any(last_id.split(".")[0] in label for label in labels)


async def test_readyz_probes_the_upstream_and_says_why_not(tmp_path: Path) -> None:
    broken = [sys.executable, "-c", "import sys; sys.exit(3)"]
    async with aiohttp.ClientSession() as http:
        async with run_proxy(tmp_path, SERVER) as proxy, http.get(proxy.base + "/readyz") as resp:
            assert resp.status == 200, await resp.text()
            assert (await resp.json()) == {
                "status": "ready",
                "reasons": [],
                "upstreams": {"default": "ready"},
            }
        async with run_proxy(tmp_path, broken) as proxy:
            async with http.get(proxy.base + "/readyz") as resp:
                assert resp.status == 503
                body = await resp.json()
            assert body["status"] == "not_ready"
            assert "the upstream cannot be started or reached" in body["reasons"][0]
            async with http.get(proxy.base + "/healthz") as resp:
                assert resp.status == 200  # alive all the same: not a reason to restart it
