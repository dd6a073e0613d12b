"""The official `mcp` Python SDK client in 2026-07-28 ("modern") mode, as a program.

Run as ``python tests/e2e/modern_py_client.py URL`` against the proxy in front of
``tests/fixtures/modern_probe_server.py``. It prints one JSON object per line on stdout:
``{"step": NAME, "ok": true, ...}`` or ``{"step": NAME, "ok": false, "error": "..."}`` for
each step of :data:`STEPS`, then ``{"done": true}``; a failed step does not stop the
others (a step that needs the connection fails with it).

Only the SDK's public API is used (mcp 2.3.0):

- ``Client(transport, mode="2026-07-28")`` pins the modern era: no ``initialize`` and no
  ``server/discover`` at connect (the SDK adopts a synthesized discover result), so the
  ``discover`` step sends one itself (``session.send_discover``) and adopts the answer.
- ``Client(url, mode="auto")`` (the SDK's default) must choose the modern era by itself.
- MRTR: ``call_tool`` resolves ``input_required`` results through ``elicitation_callback``
  and retries with ``inputResponses`` + ``requestState`` on its own.
- ``Client.listen(...)`` is ``subscriptions/listen``; leaving it closes the stream.
- Cancellation is cancelling the task that awaits ``call_tool``: at 2026-07-28 the SDK's
  HTTP transport then closes that request's response stream (and sends no notification).

The HTTP client is the SDK's ``httpx2.AsyncClient`` with hooks that record every exchange
(the ``wire`` step reports them: only POSTs, no ``Mcp-Session-Id``, the 2026 headers).
"""

from __future__ import annotations

import json
import sys
import traceback
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated, ServerEvent, Subscription, ToolsListChanged

MODERN: Final = "2026-07-28"
STEPS: Final = (
    "connect",
    "discover",
    "auto_mode",
    "tools",
    "prompts",
    "resources",
    "elicitation",
    "slow_call",
    "listen_ack",
    "listen_tools_changed",
    "listen_resource_updated",
    "listen_close",
    "cancel",
    "wire",
)
COUNTER_URI: Final = "probe://counter"
BASE_TOOLS: Final = {"echo", "ask", "hang", "hang_status", "add_tool", "bump", "events"}
ANSWER: Final = "blue"
QUESTION: Final = "Which colour? (py)"
CLIENT_INFO: Final = types.Implementation(name="modern-py-e2e", version="0")
STEP_DEADLINE_S: Final = 30.0
SLOW_CALL_S: Final = 1.5  # longer than the proxy's tasks.after_ms in the test
EVENT_DEADLINE_S: Final = 15.0
HTTP_TIMEOUT: Final = httpx2.Timeout(30.0, read=120.0)

Details = dict[str, Any]


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class StepFailed(Exception):
    """An expectation of a step did not hold."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise StepFailed(message)


def describe(exc: BaseException) -> str:
    """``Type: message``; an exception group (anyio task groups) by its leaves."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(describe(leaf) for leaf in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


@dataclass
class WireLog:
    """Every HTTP exchange of the modern client, from the httpx2 hooks."""

    exchanges: list[dict[str, Any]] = field(default_factory=list)

    async def on_response(self, response: httpx2.Response) -> None:
        request = response.request
        self.exchanges.append(
            {
                "method": request.method,
                "mcp_method": request.headers.get("mcp-method"),
                "mcp_name": request.headers.get("mcp-name"),
                "protocol_version": request.headers.get("mcp-protocol-version"),
                "session_id_sent": request.headers.get("mcp-session-id"),
                "status": response.status_code,
                "content_type": response.headers.get("content-type"),
                "session_id_received": response.headers.get("mcp-session-id"),
            }
        )


@dataclass
class Elicitations:
    """What the elicitation callback was asked."""

    messages: list[str] = field(default_factory=list)

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.messages.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": ANSWER})


class Scenario:
    def __init__(self, url: str) -> None:
        self.url = url
        self.wire = WireLog()
        self.elicitations = Elicitations()
        self.client: Client | None = None
        self.subscription: Subscription | None = None

    async def run_step(self, name: str, body: Callable[[], Awaitable[Details]]) -> None:
        try:
            with anyio.fail_after(STEP_DEADLINE_S):
                details = await body()
        except Exception as exc:
            emit({"step": name, "ok": False, "error": describe(exc)})
            traceback.print_exc(file=sys.stderr)
        else:
            emit({"step": name, "ok": True, **details})

    @property
    def connected(self) -> Client:
        if self.client is None:
            raise StepFailed("not connected (see the connect step)")
        return self.client

    # -- steps -----------------------------------------------------------------

    async def connect(self) -> Details:
        client = self.connected
        expect(client.protocol_version == MODERN, f"negotiated {client.protocol_version}")
        return {"protocol_version": client.protocol_version}

    async def discover(self) -> Details:
        client = self.connected
        raw = await client.session.send_discover(MODERN)
        result = types.DiscoverResult.model_validate(raw)
        client.session.adopt(result)
        expect(
            MODERN in result.supported_versions, f"supportedVersions {result.supported_versions}"
        )
        expect(raw.get("resultType") == "complete", f"resultType {raw.get('resultType')!r}")
        caps = raw.get("capabilities") or {}
        expect({"tools", "prompts", "resources"} <= set(caps), f"capabilities {caps}")
        server_info = (raw.get("_meta") or {}).get(types.SERVER_INFO_META_KEY)
        expect(client.server_info is not None, "no _meta io.modelcontextprotocol/serverInfo")
        return {
            "supported_versions": result.supported_versions,
            "capabilities": caps,
            "server_info": server_info,
            "ttl_ms": raw.get("ttlMs"),
            "cache_scope": raw.get("cacheScope"),
        }

    async def auto_mode(self) -> Details:
        async with Client(self.url, mode="auto", client_info=CLIENT_INFO) as auto:
            expect(auto.protocol_version == MODERN, f"auto mode chose {auto.protocol_version}")
            echo = await auto.call_tool("echo", {"text": "auto"})
            expect(text_of(echo) == "auto", f"echo answered {text_of(echo)!r}")
            info = auto.server_info
            return {
                "protocol_version": auto.protocol_version,
                "server_info": info.model_dump() if info else None,
            }

    async def tools(self) -> Details:
        client = self.connected
        listed = await client.list_tools(cache_mode="refresh")
        names = {tool.name for tool in listed.tools}
        expect(names >= BASE_TOOLS, f"tools/list gave {sorted(names)}")
        echo = await client.call_tool("echo", {"text": "hello modern"})
        expect(text_of(echo) == "hello modern", f"echo answered {text_of(echo)!r}")
        expect(not echo.is_error, "echo answered isError")
        return {"tools": sorted(names), "ttl_ms": listed.ttl_ms, "cache_scope": listed.cache_scope}

    async def prompts(self) -> Details:
        client = self.connected
        listed = await client.list_prompts(cache_mode="refresh")
        names = [prompt.name for prompt in listed.prompts]
        expect("greet" in names, f"prompts/list gave {names}")
        got = await client.get_prompt("greet", {"name": "Ada"})
        texts = [m.content.text for m in got.messages if isinstance(m.content, types.TextContent)]
        expect(texts == ["Hello, Ada!"], f"prompts/get gave {texts}")
        return {"prompts": names, "messages": texts}

    async def resources(self) -> Details:
        client = self.connected
        listed = await client.list_resources(cache_mode="refresh")
        uris = [str(resource.uri) for resource in listed.resources]
        expect(COUNTER_URI in uris and "probe://readme" in uris, f"resources/list gave {uris}")
        read = await client.read_resource("probe://readme", cache_mode="refresh")
        texts = [c.text for c in read.contents if isinstance(c, types.TextResourceContents)]
        expect(len(texts) == 1 and "modern probe" in texts[0], f"resources/read gave {texts}")
        return {"resources": uris, "text": texts[0], "ttl_ms": read.ttl_ms}

    async def elicitation(self) -> Details:
        client = self.connected
        before = len(self.elicitations.messages)
        result = await client.call_tool("ask", {"question": QUESTION})
        asked = self.elicitations.messages[before:]
        expect(asked == [QUESTION], f"the elicitation callback was asked {asked}")
        expect(text_of(result) == ANSWER, f"ask answered {text_of(result)!r}")
        return {"asked": asked, "answer": text_of(result)}

    async def slow_call(self) -> Details:
        """A call longer than the façade's ``tasks.after_ms`` (1000): this client does not
        declare the Tasks extension, so it must get the plain result, never a task."""
        client = self.connected
        token = f"py-slow-{uuid.uuid4().hex[:8]}"
        result = await client.call_tool("hang", {"token": token, "seconds": SLOW_CALL_S})
        expect(text_of(result) == f"slept {SLOW_CALL_S:g}", f"hang answered {text_of(result)!r}")
        return {"answer": text_of(result)}

    async def listen_ack(self) -> Details:
        expect(self.subscription is not None, "subscriptions/listen was not acknowledged")
        assert self.subscription is not None
        honored = self.subscription.honored
        expect(honored.tools_list_changed is True, f"honored {honored}")
        expect(COUNTER_URI in (honored.resource_subscriptions or []), f"honored {honored}")
        return {
            "subscription_id": self.subscription.subscription_id,
            "honored": honored.model_dump(by_alias=True, exclude_none=True),
        }

    async def listen_tools_changed(self) -> Details:
        client = self.connected
        sub = self._subscription()
        name = f"extra_py_{uuid.uuid4().hex[:8]}"
        await client.call_tool("add_tool", {"name": name})
        await _next_event(sub, lambda event: isinstance(event, ToolsListChanged))
        listed = await client.list_tools(cache_mode="refresh")
        names = {tool.name for tool in listed.tools}
        expect(name in names, f"{name} not in tools/list after the change: {sorted(names)}")
        return {"added": name}

    async def listen_resource_updated(self) -> Details:
        client = self.connected
        sub = self._subscription()
        bumped = text_of(await client.call_tool("bump", {}))
        await _next_event(
            sub, lambda event: isinstance(event, ResourceUpdated) and event.uri == COUNTER_URI
        )
        read = await client.read_resource(COUNTER_URI, cache_mode="refresh")
        texts = [c.text for c in read.contents if isinstance(c, types.TextResourceContents)]
        expect(texts == [bumped], f"counter reads {texts}, bump said {bumped}")
        return {"counter": bumped}

    def _subscription(self) -> Subscription:
        if self.subscription is None:
            raise StepFailed("no subscription (see listen_ack)")
        return self.subscription

    async def cancel(self) -> Details:
        client = self.connected
        token = f"py-{uuid.uuid4().hex[:8]}"
        outcome: dict[str, Any] = {}

        async def hang() -> None:
            try:
                result = await client.call_tool(
                    "hang", {"token": token, "seconds": 60}, read_timeout_seconds=120
                )
                outcome["answered"] = text_of(result)
            except anyio.get_cancelled_exc_class():
                outcome["cancelled"] = True
                raise
            except Exception as exc:
                outcome["error"] = describe(exc)

        async def status() -> list[dict[str, Any]]:
            reply = await client.call_tool("hang_status", {"token": token})
            events: list[dict[str, Any]] = json.loads(text_of(reply))
            return events

        async def status_has(event: str) -> list[dict[str, Any]]:
            with anyio.fail_after(EVENT_DEADLINE_S):
                while True:
                    events = await status()
                    if any(e["event"] == event for e in events):
                        return events
                    await anyio.sleep(0.1)

        scope = anyio.CancelScope()
        not_started: Exception | None = None

        async def run_hang() -> None:
            with scope:
                await hang()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run_hang)
            try:
                await status_has("hang_started")
            except Exception as exc:  # re-raised below, outside the task group
                not_started = exc
            scope.cancel()  # closes the call's response stream
        if not_started is not None:
            raise StepFailed(f"the hang call never started upstream: {not_started!r}")
        expect("answered" not in outcome and "error" not in outcome, f"the call ended {outcome}")
        events = await status_has("hang_cancelled")
        started = [e for e in events if e["event"] == "hang_started"]
        cancelled = [e for e in events if e["event"] == "hang_cancelled"]
        return {"token": token, "started": started, "cancelled": cancelled}

    async def wire_step(self) -> Details:
        exchanges = self.wire.exchanges
        not_post = [x for x in exchanges if x["method"] != "POST"]
        expect(not not_post, f"non-POST requests: {not_post}")
        sessions = [x for x in exchanges if x["session_id_received"] or x["session_id_sent"]]
        expect(not sessions, f"Mcp-Session-Id on the wire: {sessions}")
        wrong = [
            x
            for x in exchanges
            if x["protocol_version"] != MODERN or not x["mcp_method"] or x["status"] >= 400
        ]
        expect(not wrong, f"exchanges without the 2026 headers or failed: {wrong}")
        methods = sorted({x["mcp_method"] for x in exchanges})
        expect("initialize" not in methods, "the modern client sent initialize")
        return {"count": len(exchanges), "methods": methods}

    # -- the whole run ---------------------------------------------------------

    async def run(self) -> None:
        async with httpx2.AsyncClient(
            timeout=HTTP_TIMEOUT, event_hooks={"response": [self.wire.on_response]}
        ) as http:
            transport = streamable_http_client(self.url, http_client=http)
            try:
                async with Client(
                    transport,
                    mode=MODERN,
                    client_info=CLIENT_INFO,
                    elicitation_callback=self.elicitations,
                    read_timeout_seconds=STEP_DEADLINE_S,
                ) as client:
                    self.client = client
                    await self.steps()
            except Exception as exc:
                # Connecting never fails on the wire in pin mode; anything here is a crash.
                emit({"step": "connect", "ok": False, "error": describe(exc)})
                traceback.print_exc(file=sys.stderr)
        emit({"done": True})

    async def steps(self) -> None:
        await self.run_step("connect", self.connect)
        await self.run_step("discover", self.discover)
        await self.run_step("auto_mode", self.auto_mode)
        await self.run_step("tools", self.tools)
        await self.run_step("prompts", self.prompts)
        await self.run_step("resources", self.resources)
        await self.run_step("elicitation", self.elicitation)
        await self.run_step("slow_call", self.slow_call)
        await self.listen_steps()
        await self.run_step("cancel", self.cancel)
        await self.run_step("wire", self.wire_step)

    async def listen_steps(self) -> None:
        client = self.connected
        try:
            with anyio.fail_after(STEP_DEADLINE_S):
                listening = client.listen(
                    tools_list_changed=True, resource_subscriptions=[COUNTER_URI]
                )
                self.subscription = await listening.__aenter__()
        except Exception as exc:
            self.subscription = None
            for name in ("listen_ack", "listen_tools_changed", "listen_resource_updated"):
                emit({"step": name, "ok": False, "error": describe(exc)})
            emit({"step": "listen_close", "ok": False, "error": "never opened"})
            traceback.print_exc(file=sys.stderr)
            return
        try:
            await self.run_step("listen_ack", self.listen_ack)
            await self.run_step("listen_tools_changed", self.listen_tools_changed)
            await self.run_step("listen_resource_updated", self.listen_resource_updated)
        finally:
            self.subscription = None

            async def close() -> Details:
                await listening.__aexit__(None, None, None)
                # The endpoint still serves requests after the listen stream is gone.
                echo = await client.call_tool("echo", {"text": "after listen"})
                expect(text_of(echo) == "after listen", f"echo answered {text_of(echo)!r}")
                return {}

            await self.run_step("listen_close", close)


async def _next_event(sub: Subscription, wanted: Callable[[ServerEvent], bool]) -> ServerEvent:
    """The first event of ``sub`` that is ``wanted`` (others are skipped)."""
    with anyio.fail_after(EVENT_DEADLINE_S):
        async for event in sub:
            if wanted(event):
                return event
    raise StepFailed("the subscription ended before the event arrived")


def main() -> None:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} URL", file=sys.stderr)
        raise SystemExit(2)
    anyio.run(Scenario(sys.argv[1]).run)


if __name__ == "__main__":
    main()
