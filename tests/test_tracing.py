"""OpenTelemetry traces end to end (issue 22): the proxy run with the standard ``OTEL_*``
variables pointing at a real OTLP/HTTP receiver (tests/otlp_receiver.py); a client that
sends a known ``traceparent`` gets the expected span tree in its own trace, and the server
behind the proxy gets the context (``params._meta``, and the header over HTTP)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from tests.downstream.sse_client import RawSession, read_events
from tests.downstream.ws_client import socket, tool
from tests.modern.client import Modern
from tests.modern.support import SERVER, received
from tests.otlp_receiver import Receiver, call, one, otlp_receiver, traceparent, tracing_env
from tests.support import RunningProxy, eventually, initialize_request, run_proxy_on


def config(server_log: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    made: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "upstream": {
            "command": list(SERVER),
            "env": {"TASK_SERVER_LOG": str(server_log)},
            "stop_grace_seconds": 3,
        },
        "log": {"format": "json", "level": "debug"},
    }
    for key, value in sections.items():
        made.setdefault(key, {}).update(value)
    return made


@contextlib.asynccontextmanager
async def traced_proxy(
    tmp_path: Path, **sections: dict[str, Any]
) -> AsyncIterator[tuple[RunningProxy, Receiver, aiohttp.ClientSession, Path]]:
    server_log = tmp_path / "server.log"
    async with (
        otlp_receiver() as receiver,
        run_proxy_on(tmp_path, config(server_log, **sections), env=tracing_env(receiver)) as proxy,
        aiohttp.ClientSession() as http,
    ):
        yield proxy, receiver, http, server_log


def sent_to_server(server_log: Path, method: str) -> list[dict[str, Any]]:
    return [m for m in received(server_log) if m.get("method") == method]


async def test_a_legacy_call_is_one_trace_from_the_client_to_the_server(tmp_path: Path) -> None:
    async with traced_proxy(tmp_path) as (proxy, receiver, http, server_log):
        client = RawSession(http, proxy.url)
        await client.initialize()
        header, trace_id, client_span = traceparent()
        headers = client.headers(traceparent=header, tracestate="vendor=1")
        async with http.post(proxy.url, json=call(7, "wait", seconds=0), headers=headers) as resp:
            assert resp.status == 200
            await read_events(resp)
        request = await receiver.wait_for(
            "the call's spans",
            lambda: receiver.with_kinds("tools/call wait", trace_id, "server", "client"),
        )
        server = one([s for s in request if s.kind == "server"])
        assert server.parent_id == client_span  # the client's span is its parent
        assert server.service == "proxy-under-test"  # OTEL_SERVICE_NAME
        assert server.attributes["mcp.method.name"] == "tools/call"
        assert server.attributes["gen_ai.tool.name"] == "wait"
        assert server.attributes["gen_ai.operation.name"] == "execute_tool"
        assert server.attributes["jsonrpc.request.id"] == "7"
        assert server.attributes["mcp.session.id"] == client.session_id[:8]
        assert server.attributes["mcp_proxy.era"] == "legacy"
        assert server.attributes["mcp_proxy.server"] == "default"
        assert server.attributes["mcp_proxy.outcome"] == "ok"
        assert isinstance(server.attributes["mcp_proxy.stream"], int)
        upstream = one([s for s in request if s.kind == "client"])
        assert upstream.parent_id == server.span_id
        # The server got the proxy's span as the parent of its work, in the client's trace.
        (forwarded,) = sent_to_server(server_log, "tools/call")
        meta = forwarded["params"]["_meta"]
        assert meta["traceparent"] == f"00-{trace_id}-{upstream.span_id}-01"
        assert meta["tracestate"] == "vendor=1"


async def test_the_context_in_meta_wins_and_an_error_code_is_recorded(tmp_path: Path) -> None:
    async with traced_proxy(tmp_path) as (proxy, receiver, http, server_log):
        client = RawSession(http, proxy.url)
        await client.initialize()
        header, _, _ = traceparent()
        in_meta, trace_id, client_span = traceparent()
        body = call(8, "fail")
        body["params"]["_meta"] = {"traceparent": in_meta, "progressToken": "p"}
        async with http.post(
            proxy.url, json=body, headers=client.headers(traceparent=header)
        ) as resp:
            (answer,) = [json.loads(e.data) for e in await read_events(resp) if e.data]
        assert answer["error"]["code"] == -32000
        spans = await receiver.wait_for(
            "the failed call's spans",
            lambda: receiver.with_kinds("tools/call fail", trace_id, "server"),
        )
        server = one([s for s in spans if s.kind == "server"])
        assert server.parent_id == client_span
        assert server.attributes["rpc.response.status_code"] == "-32000"
        assert server.attributes["error.type"] == "-32000"
        assert server.status == 2  # error
        (forwarded,) = sent_to_server(server_log, "tools/call")
        assert forwarded["params"]["_meta"]["progressToken"] == "p"  # the rest kept


async def test_a_modern_call_that_becomes_a_task_is_traced_to_the_task_end(
    tmp_path: Path,
) -> None:
    async with traced_proxy(tmp_path, tasks={"mode": "always"}) as (proxy, receiver, http, log):
        modern = Modern(http, proxy.url)
        header, trace_id, client_span = traceparent()
        created = await modern.call("wait", {"seconds": 0.2}, headers={"traceparent": header})
        task_id = created.result["taskId"]
        await eventually(
            lambda: _task_status(modern, task_id), what="the task to complete", interval=0.1
        )
        spans = await receiver.wait_for("the task's span", lambda: receiver.named("task", trace_id))
        task = one(spans)
        request = one(
            [s for s in receiver.named("tools/call wait", trace_id) if s.kind == "server"]
        )
        assert request.parent_id == client_span
        assert request.attributes["mcp_proxy.era"] == "modern"
        assert request.attributes["mcp.protocol.version"] == "2026-07-28"
        assert task.parent_id == request.span_id
        assert task.attributes["mcp_proxy.task.id"] == task_id[:8]
        assert task.attributes["mcp_proxy.task.status"] == "completed"
        (forwarded,) = sent_to_server(log, "tools/call")
        assert forwarded["params"]["_meta"]["traceparent"].split("-")[1] == trace_id


async def test_an_mrtr_round_is_a_child_of_the_retry_that_continues_it(tmp_path: Path) -> None:
    async with traced_proxy(tmp_path) as (proxy, receiver, http, _log):
        modern = Modern(http, proxy.url)
        asked = await modern.call("ask", {"question": "Q?"})
        (key,) = asked.result["inputRequests"]
        header, trace_id, client_span = traceparent()
        params = {
            "name": "ask",
            "arguments": {"question": "Q?"},
            "requestState": asked.result["requestState"],
            "inputResponses": {key: {"action": "accept", "content": {"answer": "yes"}}},
            "_meta": {"traceparent": header},
        }
        answered = await modern.send("tools/call", params)
        assert "yes" in answered.result["content"][0]["text"]
        rounds = await receiver.wait_for(
            "the MRTR round's span", lambda: receiver.named("mrtr round", trace_id)
        )
        retry = one([s for s in receiver.named("tools/call ask", trace_id) if s.kind == "server"])
        assert retry.parent_id == client_span
        assert one(rounds).parent_id == retry.span_id
        assert one(rounds).attributes["mcp_proxy.mrtr.input_responses"] == 1


async def _task_status(modern: Modern, task_id: str) -> bool:
    got = await modern.task("tasks/get", task_id)
    return bool(got.result.get("status") == "completed")


async def test_a_resume_is_a_span_with_its_last_event_id_and_replayed_count(
    tmp_path: Path,
) -> None:
    async with traced_proxy(tmp_path) as (proxy, receiver, http, server_log):
        client = RawSession(http, proxy.url)
        await client.initialize()
        body = call(9, "wait", seconds=0.3)
        async with http.post(proxy.url, json=body, headers=client.headers()) as resp:
            first = await resp.content.readuntil(b"\n\n")  # the priming event alone
        (primed,) = [line for line in first.decode().splitlines() if line.startswith("id: ")]
        last_event_id = primed[4:]
        header, trace_id, client_span = traceparent()
        headers = client.headers(traceparent=header, **{"Last-Event-ID": last_event_id})
        headers["Accept"] = "text/event-stream"
        async with http.get(proxy.url, headers=headers) as resp:
            assert resp.status == 200
            replayed = [json.loads(e.data) for e in await read_events(resp) if e.data]
        assert replayed[-1]["id"] == 9
        resume = one(
            await receiver.wait_for("the resume span", lambda: receiver.named("resume", trace_id))
        )
        assert resume.parent_id == client_span
        assert resume.attributes["mcp_proxy.resume.last_event_id"] == last_event_id
        assert resume.attributes["mcp_proxy.stream"] == int(last_event_id.split(".")[1])
        assert resume.attributes["mcp_proxy.resume.replayed"] >= 0
        assert resume.attributes["mcp.session.id"] == client.session_id[:8]


async def test_a_trace_the_client_did_not_sample_still_reaches_the_server(tmp_path: Path) -> None:
    """``traceparent`` flags 00: the proxy records nothing of it, and passes the context on:
    the server sees the client's trace and its decision (with the proxy's unrecorded span
    as the parent, as W3C Trace Context has each hop do)."""
    async with traced_proxy(tmp_path) as (proxy, receiver, http, server_log):
        client = RawSession(http, proxy.url)
        await client.initialize()
        header, trace_id, client_span = traceparent()
        unsampled = header[:-2] + "00"
        headers = client.headers(traceparent=unsampled)
        async with http.post(proxy.url, json=call(4, "wait", seconds=0), headers=headers) as resp:
            await read_events(resp)
        sampled, _, _ = traceparent()  # a sampled call after it: its spans show the export ran
        async with http.post(
            proxy.url, json=call(5, "wait", seconds=0), headers=client.headers(traceparent=sampled)
        ) as resp:
            await read_events(resp)
        await receiver.wait_for(
            "the sampled call", lambda: receiver.named("tools/call wait", sampled.split("-")[1])
        )
        assert not [s for s in receiver.spans if s.trace_id == trace_id]
        first = sent_to_server(server_log, "tools/call")[0]
        version, passed_trace, parent, flags = first["params"]["_meta"]["traceparent"].split("-")
        assert (version, passed_trace, flags) == ("00", trace_id, "00")
        assert parent != client_span


async def test_a_call_over_the_websocket_joins_the_trace_in_its_meta(tmp_path: Path) -> None:
    """``/ws`` has no header per message: ``params._meta.traceparent`` carries the context;
    the request's span covers its admission, its upstream exchange ends with the answer."""
    async with traced_proxy(tmp_path) as (proxy, receiver, _http, server_log):
        header, trace_id, client_span = traceparent()
        async with socket(proxy) as ws:
            hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}
            hello["clientInfo"] = {"name": "ws-test", "version": "0"}
            started, _ = await ws.call(0, "initialize", hello)
            assert "result" in started, started
            await ws.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            params = tool("wait", {"seconds": 0})
            params["_meta"] = {"traceparent": header}
            answer, _ = await ws.call(11, "tools/call", params)
            assert "result" in answer, answer
        spans = await receiver.wait_for(
            "the socket call's spans",
            lambda: receiver.with_kinds("tools/call wait", trace_id, "server", "client"),
        )
        request = one([s for s in spans if s.kind == "server"])
        exchange = one([s for s in spans if s.kind == "client"])
        assert request.parent_id == client_span
        assert exchange.parent_id == request.span_id
        assert exchange.status != 2  # no error
        (sent,) = sent_to_server(server_log, "tools/call")
        assert sent["params"]["_meta"]["traceparent"] == f"00-{trace_id}-{exchange.span_id}-01"


async def test_the_principal_is_named_and_a_cancelled_exchange_ends(tmp_path: Path) -> None:
    """Inbound auth's principal is ``user.id`` (its name; the token is nowhere in a span);
    a request the client cancels ends its upstream span as ``cancelled`` (no answer will)."""
    token = "a-token-for-alice-0123456789"
    auth = {"tokens": [{"token": token, "principal": "alice"}]}
    quick = {"drain_seconds": 0}  # the cancelled call is never answered: no drain for it
    async with traced_proxy(tmp_path, auth=auth, listen=quick) as (proxy, receiver, http, log):
        client = RawSession(http, proxy.url)
        bearer = {"Authorization": f"Bearer {token}"}
        body = initialize_request(0, version=client.version, client="raw")
        async with http.post(proxy.url, json=body, headers=client.headers(**bearer)) as resp:
            assert resp.status == 200, await resp.text()
            client.session_id = resp.headers["Mcp-Session-Id"]
            await read_events(resp)
        header, trace_id, _ = traceparent()
        headers = client.headers(traceparent=header, **bearer)
        async with http.post(proxy.url, json=call(12, "wait", seconds=60), headers=headers) as resp:
            await resp.content.readuntil(b"\n\n")  # the priming event: the call is on
            await eventually(lambda: sent_to_server(log, "tools/call"), what="the call upstream")
            cancel = {
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": {"requestId": 12, "reason": "changed my mind"},
            }
            async with http.post(proxy.url, json=cancel, headers=headers) as cancelled:
                assert cancelled.status == 202
            # (the call's own span ends when its response does: not waited for here)
            spans = await receiver.wait_for(
                "the cancel's span and the cancelled exchange",
                lambda: (
                    receiver.named("notifications/cancelled", trace_id)
                    and [
                        s for s in receiver.named("tools/call wait", trace_id) if s.kind == "client"
                    ]
                ),
            )
        exchange = one(spans)
        assert exchange.attributes["mcp_proxy.outcome"] == "cancelled"
        notice = one(receiver.named("notifications/cancelled", trace_id))
        assert notice.attributes["user.id"] == "alice"
        assert notice.attributes["mcp.session.id"] == client.session_id[:8]
        assert all(token not in str(s.attributes) for s in receiver.spans)
