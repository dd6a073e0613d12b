"""The modern (2026-07-28) side of ``/mcp``: stateless requests over pooled upstreams.

:class:`ModernFacade` answers one POSTed modern request (``StreamableHttp`` decides the
era, :func:`proxy.core.era.is_modern`). Each request is validated
(:func:`proxy.core.era.check_request`), run on a pooled upstream session
(:mod:`proxy.modern.pool`), and answered on its own response: ``application/json`` when
the answer comes before anything else, else an SSE stream (request-scoped progress and
log messages, then the answer; keepalive comments while nothing happens). Closing that
response cancels the request upstream, unless it became a task. A server→client request
raised during the call becomes an ``input_required`` result with a signed
``requestState`` (:mod:`proxy.core.reqstate`); the client's retry continues the same
upstream call. ``tools/call`` of a client that declares the Tasks extension may become a
task (``tasks.mode``): :mod:`proxy.modern.tasks`.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog
from aiohttp import web

from proxy import forwarding
from proxy.core import jsonrpc, reqstate
from proxy.core.era import (
    META_SERVER_INFO,
    SUPPORTED_VERSIONS,
    TASKS_EXTENSION,
    ModernRequest,
    check_param_headers,
    check_request,
    invalid_params,
    method_not_found,
    missing_capability,
    tasks_capability_missing,
    upstream_params,
)
from proxy.core.errors import BadRequest, Overloaded, ProxyError
from proxy.core.jsonrpc import Kind, Message
from proxy.core.taskrecord import created, detailed
from proxy.downstream.auth import principal_of
from proxy.modern.call import Call
from proxy.modern.legacy_tasks import LegacyTasks
from proxy.modern.listen import Hub, listen
from proxy.modern.pool import UpstreamPool
from proxy.modern.reply import Reply, dumps
from proxy.modern.tasks import TaskKeeper
from proxy.modern.tools import ToolIndex, task_support
from proxy.registry import Registry
from proxy.servers import Server
from proxy.store.base import StoreError

log = structlog.get_logger("proxy.modern")

_FORWARDED = frozenset(
    {
        "tools/list",
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        "completion/complete",
    }
)
_WITH_INPUT = frozenset({"tools/call", "prompts/get", "resources/read"})
_CACHEABLE = frozenset(
    {"tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"}
)
_TASK_METHODS = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
_LIVENESS_SECONDS = 1.0
# Gathering a server's questions into one input_required result: done when none came for
# the quiet time, at most the max.
_GATHER_QUIET_SECONDS = 0.03
_GATHER_MAX_SECONDS = 0.25
# HTTP statuses the spec gives these JSON-RPC errors (when the answer is not streamed).
_ERROR_STATUS = {-32601: 404, -32020: 400, -32021: 400, -32022: 400}


class ModernFacade:
    """Everything modern clients reach: the pool, the listeners, the tasks."""

    def __init__(self, server: Server, registry: Registry) -> None:
        self.server = server
        self.config = config = server.config
        self.registry = registry
        context = registry.context  # the lead gives the facade a modern context of its own
        self.secret = context.settings.token_secret
        self.pool = UpstreamPool(config, server.health, context.metrics, server.name)
        self.hub = Hub(self.pool)
        self.tools = ToolIndex(self.pool)
        self.pool.on_broadcast = self._broadcast
        self.tasks_enabled = config.tasks.enabled
        self.tasks = TaskKeeper(
            config.tasks,
            context.store,
            context.owner,
            shared=context.store.shared,
            alive=self._alive,
            forward=self._forward if context.store.shared else None,
            publish=self.hub.publish_task,
            server=server.name,
        )
        context.task_services.append(self.tasks)
        metrics = context.metrics
        name = server.name
        metrics.watch(metrics.tasks_running.labels(name), lambda: self.tasks.running)
        metrics.watch(metrics.modern_calls.labels(name), lambda: len(self.live))
        metrics.watch(metrics.pool_sessions.labels(name), lambda: len(self.pool.live_sessions()))
        self.tasks.on_end = lambda status: metrics.tasks_ended.labels(status).inc()
        self.legacy = LegacyTasks(self)
        self.live: set[Call] = set()  # modern calls not yet ended (parked and tasks too)
        self.parked: dict[str, Call] = {}

    def health(self) -> dict[str, Any]:
        """The modern side for ``/healthz``: what it holds right now."""
        return {
            "pool_sessions": len(self.pool.live_sessions()),
            "calls": len(self.live),
            "awaiting_input": len(self.parked),
            "tasks_running": self.tasks.running,
            "listeners": len(self.hub.listeners),
        }

    def _broadcast(self, msg: Message) -> None:
        if msg.method == "notifications/tools/list_changed":
            self.tools.invalidate()
        self.hub.publish(msg)

    async def _alive(self, owner: str) -> bool:
        replicas = self.registry.context.replicas
        return replicas is not None and await replicas.owner_alive(owner)

    async def _forward(self, owner: str, message: forwarding.TaskAction) -> forwarding.Reply:
        replicas = self.registry.context.replicas
        if replicas is None:
            return forwarding.UnknownTask()
        return await replicas.forward(owner, message)

    async def close(self) -> None:
        self.hub.close_all()
        for call in list(self.parked.values()):
            call.cancel("the proxy is shutting down")
        self.parked.clear()
        await self.tasks.close()
        await self.pool.stop()

    # ------------------------------------------------------------------ entry
    async def post(self, request: web.Request, msg: Message) -> web.StreamResponse:
        if msg.kind is Kind.RESPONSE:
            raise BadRequest("Bad Request: a 2026-07-28 client sends no responses")
        if msg.kind is Kind.NOTIFICATION:
            return web.Response(status=202)  # none is defined over HTTP; accepted, unused
        try:
            client = check_request(msg.raw, request.headers)
            return await self._dispatch(request, msg, client)
        except ProxyError as exc:
            if exc.request_id is None:
                exc.request_id = msg.id
            raise

    async def _dispatch(
        self, request: web.Request, msg: Message, client: ModernRequest
    ) -> web.StreamResponse:
        method = msg.method or ""
        if method == "server/discover":
            return web.json_response(
                jsonrpc.ok_response(msg.id, await self.discover()), dumps=dumps
            )
        if method in _TASK_METHODS and self.tasks_enabled:
            if not client.tasks:
                raise tasks_capability_missing()
            result = await self._task_request(method, msg.params, principal_of(request))
            return web.json_response(jsonrpc.ok_response(msg.id, result), dumps=dumps)
        if method == "subscriptions/listen":
            return await listen(self, request, msg, client)
        if method in _WITH_INPUT:
            state = msg.params.get("requestState")
            if state is not None:
                return await self._retry(request, msg, client, state)
            return await self._start(request, msg, client)
        if method in _FORWARDED:
            return await self._start(request, msg, client)
        raise method_not_found(method)

    # ------------------------------------------------------------------ discovery
    async def discover(self) -> dict[str, Any]:
        init = await self.pool.info()
        capabilities = {k: v for k, v in (init.get("capabilities") or {}).items() if k != "tasks"}
        if self.tasks_enabled:
            extensions = dict(capabilities.get("extensions") or {})
            extensions[TASKS_EXTENSION] = {}
            capabilities["extensions"] = extensions
        result: dict[str, Any] = {
            "resultType": "complete",
            "supportedVersions": list(SUPPORTED_VERSIONS),
            "capabilities": capabilities,
            "ttlMs": self.config.modern.cache_ttl_ms,
            "cacheScope": "private",
        }
        if isinstance(init.get("instructions"), str):
            result["instructions"] = init["instructions"]
        if isinstance(init.get("serverInfo"), dict):
            result["_meta"] = {META_SERVER_INFO: init["serverInfo"]}
        return result

    def _shape(self, method: str, message: dict[str, Any]) -> dict[str, Any]:
        """The upstream's answer as a modern result: resultType, cache hints, serverInfo."""
        result = message.get("result")
        if not isinstance(result, dict):
            return message
        shaped = dict(result)
        shaped.setdefault("resultType", "complete")
        if method in _CACHEABLE:
            shaped.setdefault("ttlMs", self.config.modern.cache_ttl_ms)
            shaped.setdefault("cacheScope", "private")
        info = (self.pool.init_result or {}).get("serverInfo")
        if isinstance(info, dict):
            meta = dict(shaped.get("_meta") or {})
            meta.setdefault(META_SERVER_INFO, info)
            shaped["_meta"] = meta
        return {"jsonrpc": "2.0", "id": message.get("id"), "result": shaped}

    # ------------------------------------------------------------------ calls
    async def _start(
        self, request: web.Request, msg: Message, client: ModernRequest
    ) -> web.StreamResponse:
        method = msg.method or ""
        call = Call(method, msg.params, client, principal=principal_of(request))
        if method == "tools/call":
            tool = (await self.tools.get()).get(str(msg.params.get("name")))
            if tool is not None:
                annotated = self.tools.header_params(tool)
                if annotated:
                    arguments = msg.params.get("arguments")
                    check_param_headers(annotated, arguments, request.headers)
            call.task_support = task_support(tool)
            if call.task_support == "required" and not (self.tasks_enabled and client.tasks):
                raise tasks_capability_missing()
        self.track(call)
        try:
            session = await self.pool.acquire(call.exclusive)
        except BaseException:
            call.fail({"code": -32603, "message": "no upstream session"})  # ends tracking
            raise
        session.begin(call, upstream_params(msg.params))
        return await self._follow(request, msg, call, started=time.monotonic())

    def track(self, call: Call) -> None:
        """Count ``call`` among the live ones until it ends; 503 past ``modern.max_calls``."""
        limit = self.config.modern.max_calls
        if len(self.live) >= limit:
            raise Overloaded(
                f"Too many modern calls at once (modern.max_calls={limit}); try again later",
                reason="too_many_calls",
            )
        self.live.add(call)

        def ended(done: Call) -> None:
            if done.done:
                self.live.discard(done)
                done.on_change.remove(ended)

        call.on_change.append(ended)

    async def _retry(
        self, request: web.Request, msg: Message, client: ModernRequest, state: object
    ) -> web.StreamResponse:
        method = msg.method or ""
        name = msg.params.get("uri" if method == "resources/read" else "name")
        principal = principal_of(request)
        call_id = reqstate.verify(self.secret, state, method, name, principal, time.time())
        call = self.parked.pop(call_id, None)
        if call is None:
            raise invalid_params(
                "Invalid params: the request this requestState continues is gone "
                "(answered, expired or held by another proxy); send the request anew"
            )
        call.client = client
        call.parked_until = None
        call.answer(msg.params.get("inputResponses"))
        return await self._follow(request, msg, call, started=time.monotonic())

    def _task_due(self, call: Call, client: ModernRequest, started: float) -> float | None:
        """When ``call`` becomes a task (monotonic time), or None if it never does."""
        tasks = self.config.tasks
        if not (self.tasks_enabled and client.tasks and call.method == "tools/call"):
            return None
        if call.task_support == "forbidden" or self.tasks.full():
            return None
        if tasks.mode == "never":
            return None
        if tasks.mode == "always":
            return started
        return started + tasks.after_ms / 1000

    async def _follow(
        self, request: web.Request, msg: Message, call: Call, started: float
    ) -> web.StreamResponse:
        """Watch ``call`` for this request until it answers, asks, becomes a task, or
        the client goes away (then it is cancelled)."""
        reply = Reply(request, self.config.sse.keepalive_seconds)
        task_at = self._task_due(call, call.client, started)
        try:
            while True:
                notes = call.take_notes()
                if notes:
                    await reply.stream(notes)
                if call.done:
                    return await self._answer(reply, msg, call)
                if call.status == "input_required" and call.pending:
                    if msg.method not in _WITH_INPUT:
                        call.answer({k: None for k in call.pending})  # refused upstream
                        continue
                    await self._gather(call)
                    if call.done or not call.pending:
                        continue
                    return await self._input_required(reply, msg, call)
                now = time.monotonic()
                if task_at is not None and now >= task_at:
                    try:
                        record = await self.tasks.adopt(call, "modern")
                    except StoreError as exc:  # no task without its record: stay plain
                        log.warning("task_not_created", error=str(exc))
                        task_at = None
                        continue
                    return await reply.finish(jsonrpc.ok_response(msg.id, created(record)))
                if reply.gone:
                    call.cancel("the client closed the request's response stream")
                    return reply.sse or web.Response(status=499)
                if reply.due() <= 0:
                    await reply.stream([])
                wait = min(_LIVENESS_SECONDS, max(0.0, reply.due()))
                if task_at is not None:
                    wait = min(wait, max(0.0, task_at - now))
                await call.changed(wait)
        except (ConnectionError, RuntimeError) as exc:
            log.debug("modern_client_gone", method=msg.method, error=repr(exc))
            if call.task_id is None and call.parked_until is None:
                call.cancel("the client closed the request's response stream")
            return reply.sse or web.Response(status=499)
        except BaseException:  # cancelled, or a fault: the call must not run on unowned
            if call.task_id is None and call.parked_until is None:
                call.cancel("the client closed the request's response stream")
            raise

    @staticmethod
    async def _gather(call: Call) -> None:
        """The server may ask several things at once: wait a moment for the rest, so that
        one ``input_required`` result carries them all."""
        deadline = time.monotonic() + _GATHER_MAX_SECONDS
        count = len(call.pending)
        while not call.done and time.monotonic() < deadline:
            await call.changed(_GATHER_QUIET_SECONDS)
            if len(call.pending) == count:
                return
            count = len(call.pending)

    async def _answer(self, reply: Reply, msg: Message, call: Call) -> web.StreamResponse:
        outcome = dict(call.outcome or {})
        outcome["id"] = msg.id
        if "error" in outcome and call.refused:
            # The server could not do without what the client did not declare.
            what = ", ".join(sorted(call.refused))
            outcome["error"] = missing_capability(dict(call.refused), what).to_jsonrpc()["error"]
        if "error" in outcome:
            error = outcome["error"]
            code = error.get("code") if isinstance(error, dict) else None
            return await reply.finish(
                {"jsonrpc": "2.0", "id": msg.id, "error": error},
                status=_ERROR_STATUS.get(code, 200) if isinstance(code, int) else 200,
            )
        if call.status == "cancelled":
            error = {"code": -32800, "message": call.status_message or "request cancelled"}
            return await reply.finish({"jsonrpc": "2.0", "id": msg.id, "error": error})
        return await reply.finish(self._shape(call.method, outcome))

    async def _input_required(self, reply: Reply, msg: Message, call: Call) -> web.StreamResponse:
        ttl = self.config.modern.input_ttl_seconds
        expires = time.time() + ttl
        method = msg.method or ""
        name = msg.params.get("uri" if method == "resources/read" else "name")
        state = reqstate.mint(self.secret, call.id, method, name, call.principal, expires)
        call.parked_until = expires
        self.parked[call.id] = call
        asyncio.get_running_loop().call_later(ttl, self._unpark, call)
        result = {
            "resultType": "input_required",
            "inputRequests": call.input_requests(),
            "requestState": state,
        }
        return await reply.finish(jsonrpc.ok_response(msg.id, result))

    def _unpark(self, call: Call) -> None:
        if call.parked_until is not None and time.time() >= call.parked_until - 0.001:
            self.parked.pop(call.id, None)
            call.cancel("the client did not send the input in time (modern.input_ttl_seconds)")

    # ------------------------------------------------------------------ tasks
    async def _task_request(
        self, method: str, params: dict[str, Any], principal: str | None
    ) -> dict[str, Any]:
        task_id = params.get("taskId")
        if method == "tasks/get":
            record = await self.tasks.record(task_id, principal)
            return {"resultType": "complete", **detailed(record)}
        if method == "tasks/update":
            await self.tasks.update(task_id, params.get("inputResponses"), principal)
        else:
            await self.tasks.cancel(task_id, principal)
        return {"resultType": "complete"}

    # ------------------------------------------------------------------ listen
