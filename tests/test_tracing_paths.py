"""Traces across the other ways a request travels (issue 22): to an HTTP server (the
``traceparent`` header beside ``params._meta``), in both eras; from one replica to the one
that holds the session (two proxies on a real Redis), with its store commits; and nothing
at all when tracing is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp

from proxy.config_tracing import TracingConfig
from tests.downstream.sse_client import RawSession, read_events
from tests.modern.client import Modern
from tests.modern.support import SERVER, received
from tests.otlp_receiver import Span, call, one, otlp_receiver, traceparent, tracing_env
from tests.proxy_lives import lives, shared
from tests.recording_upstream import recording_upstream
from tests.support import ROOT, run_proxy_on


def http_config(url: str, **tracing: Any) -> dict[str, Any]:
    return {
        "listen": {"host": "127.0.0.1", "port": 0},
        "upstream": {"url": url},
        "log": {"format": "json", "level": "debug"},
        "tracing": tracing,
    }


async def test_an_http_server_gets_the_context_as_a_header_in_both_eras(tmp_path: Path) -> None:
    async with (
        otlp_receiver() as receiver,
        recording_upstream() as upstream,
        run_proxy_on(tmp_path, http_config(upstream.url), env=tracing_env(receiver)) as proxy,
        aiohttp.ClientSession() as http,
    ):
        legacy = RawSession(http, proxy.url)
        await legacy.initialize()
        header, legacy_trace, _ = traceparent()
        body = call(3, "echo", text="legacy")
        async with http.post(proxy.url, json=body, headers=legacy.headers(traceparent=header)):
            pass
        modern_header, modern_trace, _ = traceparent()
        modern = Modern(http, proxy.url)
        answer = await modern.call(
            "echo", {"text": "modern"}, headers={"traceparent": modern_header}
        )
        assert answer.result["content"][0]["text"] == '"modern"'
        for trace_id, text in ((legacy_trace, "legacy"), (modern_trace, "modern")):
            spans = await receiver.wait_for(
                f"the {text} call's spans",
                lambda t=trace_id: receiver.with_kinds("tools/call echo", t, "client"),
            )
            exchange = one([s for s in spans if s.kind == "client"])
            (headers, sent) = one(
                [
                    (h, b)
                    for h, b in upstream.calls("tools/call")
                    if b["params"]["arguments"]["text"] == text
                ]
            )
            expected = f"00-{trace_id}-{exchange.span_id}-01"
            assert headers["traceparent"] == expected, text
            assert sent["params"]["_meta"]["traceparent"] == expected, text
            # The client's own Authorization or traceparent header is not what goes on.
            assert "Authorization" not in headers


async def test_a_forward_to_the_replica_holding_the_session_keeps_the_trace(
    tmp_path: Path, redis_url: str
) -> None:
    server_log = tmp_path / "server.log"
    async with otlp_receiver() as receiver:
        env = {**tracing_env(receiver), "TASK_SERVER_LOG": str(server_log)}
        async with lives(tmp_path, shared(redis_url), env=env) as (proxies, http):
            proxies.command = SERVER
            a = await proxies.start()
            b = await proxies.start()
            on_a = RawSession(http, a.url)
            await on_a.initialize()
            header, trace_id, client_span = traceparent()
            headers = on_a.headers(traceparent=header)
            async with http.post(b.url, json=call(5, "wait", seconds=0), headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                answers = [json.loads(e.data) for e in await read_events(resp) if e.data]
            assert answers[-1]["id"] == 5 and "result" in answers[-1], answers

            def tree() -> list[Span] | None:
                spans = [s for s in receiver.spans if s.trace_id == trace_id]
                names = {(s.name, s.kind) for s in spans}
                wanted = {
                    ("tools/call wait", "server"),  # on B
                    ("forward ForwardedPost", "client"),
                    ("forwarded post", "server"),  # on A
                    ("tools/call wait", "client"),
                    ("store commit", "client"),
                }
                return spans if wanted <= names else None

            spans = await receiver.wait_for("the forwarded call's tree", tree)
        by_name: dict[str, list[Span]] = {}
        for span in spans:
            by_name.setdefault(span.name, []).append(span)
        on_b = one([s for s in by_name["tools/call wait"] if s.kind == "server"])
        assert on_b.parent_id == client_span
        forward = one(by_name["forward ForwardedPost"])
        assert forward.parent_id == on_b.span_id and forward.kind == "client"
        served = one(by_name["forwarded post"])
        assert served.parent_id == forward.span_id and served.kind == "server"
        exchange = one([s for s in by_name["tools/call wait"] if s.kind == "client"])
        assert exchange.parent_id == served.span_id  # on A, the holder
        commits = by_name["store commit"]
        assert all(c.attributes["db.system.name"] == "redis" for c in commits)
        assert {c.parent_id for c in commits} & {served.span_id, on_b.span_id}
        (sent,) = [m for m in received(server_log) if m.get("method") == "tools/call"]
        assert sent["params"]["_meta"]["traceparent"] == f"00-{trace_id}-{exchange.span_id}-01"


async def test_off_nothing_is_exported_and_nothing_is_added_upstream(tmp_path: Path) -> None:
    """``tracing.enabled: false`` wins over the OTEL_* variables: no span leaves (the
    proxy, stopped, has exported all it would), the server gets the request as sent."""
    async with otlp_receiver() as receiver, recording_upstream() as upstream:
        config = http_config(upstream.url, enabled=False)
        async with (
            run_proxy_on(tmp_path, config, env=tracing_env(receiver)) as proxy,
            aiohttp.ClientSession() as http,
        ):
            legacy = RawSession(http, proxy.url)
            await legacy.initialize()
            header, _, _ = traceparent()
            body = call(3, "echo", text="plain")
            async with http.post(proxy.url, json=body, headers=legacy.headers(traceparent=header)):
                pass
            modern = Modern(http, proxy.url)
            await modern.call("echo", {"text": "modern"}, headers={"traceparent": header})
        assert receiver.requests == 0 and receiver.spans == []
        calls = upstream.calls("tools/call")
        assert len(calls) == 2
        for headers, sent in calls:
            assert "traceparent" not in headers and "tracestate" not in headers
            assert "traceparent" not in sent["params"].get("_meta", {})


def test_off_by_default_no_provider_and_no_sdk_is_loaded() -> None:
    """With no tracing key and no OTEL_* endpoint the proxy's modules and start() load
    neither the OpenTelemetry SDK nor its exporter (the hooks stay no-ops)."""
    assert not TracingConfig().on({})
    assert not TracingConfig().on({"OTEL_SERVICE_NAME": "x"})
    assert TracingConfig().on({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not TracingConfig().on(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}
    )
    assert not TracingConfig(enabled=False).on({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c"})
    script = (
        "import sys\n"
        "import proxy.cli, proxy.downstream.app, proxy.modern.endpoint\n"
        "from proxy import tracing\n"
        "from proxy.config import Config\n"
        "assert tracing.start(Config().tracing) is False and not tracing.on()\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk',"
        " 'opentelemetry.exporter', 'proxy.tracing.sdk')))\n"
        "print(loaded)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
