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
upstream call, on whichever replica the retry reaches (the state names the replica holding
the call: :mod:`proxy.modern.retry_forward`). ``tools/call`` of a client that declares
the Tasks extension may become a task (``tasks.mode``): :mod:`proxy.modern.tasks`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web

from proxy import forwarding
from proxy.context import ProxyContext
from proxy.core import jsonrpc
from proxy.core.admission import check_modern_draining
from proxy.core.era import (
    ModernRequest,
    check_request,
    method_not_found,
    tasks_capability_missing,
)
from proxy.core.errors import BadRequest, ProxyError
from proxy.core.jsonrpc import Kind, Message
from proxy.core.modern_results import discover_result
from proxy.core.modern_routes import Route, route
from proxy.core.taskrecord import detailed
from proxy.core.tool_policy import View
from proxy.modern import legacy_remote
from proxy.modern.call import CallRun
from proxy.modern.calls import ModernCalls
from proxy.modern.context import ModernContext
from proxy.modern.hub import Hub
from proxy.modern.legacy_remote import RemoteLegacyTasks
from proxy.modern.legacy_tasks import LegacyTasks
from proxy.modern.listen import listen
from proxy.modern.pool import UpstreamPool
from proxy.modern.reply import Reply
from proxy.modern.retry_forward import serve_retry
from proxy.modern.tasks import TaskKeeper
from proxy.modern.tools import ToolIndex
from proxy.replicas import Relay
from proxy.runtime import SessionRunner
from proxy.servers import Server


class ModernFacade:
    """Everything modern clients reach: the pool, the listeners, the tasks."""

    def __init__(self, server: Server, context: ProxyContext) -> None:
        self.server = server
        self.config = config = server.config
        self.shared = context  # the replicas exist once the store is open
        self.pool = UpstreamPool(config, server.health, context.metrics, server.name)
        self.hub = Hub(self.pool)
        self.tools = ToolIndex(self.pool)
        self.pool.on_broadcast = self._broadcast  # the one subscriber: tools, then listeners
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
        self.calls = ModernCalls(config, context, server.name, self.pool, self.tools, self.tasks)
        context.task_services.append(self.tasks)
        context.modern_sides[server.name] = self
        metrics = context.metrics
        name = server.name
        metrics.watch(metrics.tasks_running.labels(name), lambda: self.tasks.running)
        metrics.watch(metrics.modern_calls.labels(name), lambda: len(self.live))
        metrics.watch(metrics.pool_sessions.labels(name), lambda: len(self.pool.live_sessions()))
        self.tasks.on_end = lambda status: metrics.tasks_ended.labels(status).inc()
        self.context = ModernContext(
            config=config,
            pool=self.pool,
            tasks=self.tasks,
            hub=self.hub,
            track=self.calls.track,
            tasks_enabled=self.tasks_enabled,
        )
        self.legacy = LegacyTasks(self.context)
        self.legacy_remote = RemoteLegacyTasks(self.tasks)  # sessions other replicas hold

    @property
    def live(self) -> set[CallRun]:
        """The modern calls not yet ended (parked ones and tasks too)."""
        return self.calls.live

    def health(self) -> dict[str, Any]:
        """The modern side for ``/healthz``: what it holds right now."""
        return {
            "pool_sessions": len(self.pool.live_sessions()),
            "pool_idle": self.pool.idle_count(),
            "pool_start_waits": self.pool.start_waits,
            "calls": len(self.live),
            "awaiting_input": len(self.calls.parked),
            "tasks_running": self.tasks.running,
            "listeners": len(self.hub.listeners),
        }

    def _broadcast(self, msg: Message) -> None:
        if msg.method == "notifications/tools/list_changed":
            self.tools.invalidate()
        self.hub.publish(msg)

    async def _alive(self, owner: str) -> bool:
        replicas = self.shared.replicas
        return replicas is not None and await replicas.owner_alive(owner)

    async def _forward(self, owner: str, message: forwarding.TaskAction) -> forwarding.Reply:
        replicas = self.shared.replicas
        if replicas is None:
            return forwarding.UnknownTask()
        return await replicas.forward(owner, message)

    async def close(self) -> None:
        self.hub.close_all()
        self.calls.close()
        await self.tasks.close()
        await self.pool.stop()

    # ------------------------------------------------------------------ entry
    async def post(
        self,
        msg: Message,
        principal: str | None,
        headers: Mapping[str, str],
        reply: Reply,
        scopes: frozenset[str] | None = None,
    ) -> web.StreamResponse:
        """Answer one modern request of ``principal`` (its HTTP headers mirror the body)
        on ``reply``; ``scopes``: its credential's OAuth scopes (docs/tools.md)."""
        if msg.kind is Kind.RESPONSE:
            raise BadRequest("Bad Request: a 2026-07-28 client sends no responses")
        if msg.kind is Kind.NOTIFICATION:
            return web.Response(status=202)  # none is defined over HTTP; accepted, unused
        try:
            client = check_request(msg.raw, headers)
            view = self.server.policy.view(scopes)
            return await self._dispatch(msg, client, principal, headers, reply, view)
        except ProxyError as exc:
            if exc.request_id is None:
                exc.request_id = msg.id
            raise

    async def _dispatch(
        self,
        msg: Message,
        client: ModernRequest,
        principal: str | None,
        headers: Mapping[str, str],
        reply: Reply,
        view: View,
    ) -> web.StreamResponse:
        method = msg.method or ""
        # A draining replica takes no new work (503 proxy_draining: proxy/downstream/drain.py).
        draining = self.shared.draining
        check_modern_draining(
            method,
            msg.params,
            tasks_enabled=self.tasks_enabled,
            draining=draining,
            removed=self.server.removed,
        )
        match route(method, msg.params, tasks_enabled=self.tasks_enabled):
            case Route.DISCOVER:
                return await reply.finish(jsonrpc.ok_response(msg.id, await self.discover()))
            case Route.TASK:
                if not client.tasks:
                    raise tasks_capability_missing()
                result = await self._task_request(method, msg.params, principal)
                return await reply.finish(jsonrpc.ok_response(msg.id, result))
            case Route.LISTEN:
                return await listen(self.context, reply, msg, client, principal, view)
            case Route.RETRY:
                state = msg.params["requestState"]
                return await self.calls.retry(msg, client, principal, state, headers, reply)
            case Route.START:
                return await self.calls.start(msg, client, principal, headers, reply, view)
            case Route.NOT_FOUND:
                raise method_not_found(method)

    # ------------------------------------------------------------------ discovery
    async def discover(self) -> dict[str, Any]:
        return discover_result(
            await self.pool.info(),
            tasks_enabled=self.tasks_enabled,
            cache_ttl_ms=self.config.modern.cache_ttl_ms,
        )

    # ------------------------------------------------------------------ other replicas
    async def serve_forwarded_retry(
        self, message: forwarding.ForwardedRetry, relay: Relay | None
    ) -> forwarding.Reply:
        """A retry another replica received for a call parked here (``relay``: sends
        the asker the call's notes as they come)."""
        return await serve_retry(self.post, message, relay)

    def cancel_forwarded_retry(self, message: forwarding.RetryCancel) -> None:
        """The client of a retry forwarded here left: cancel the call, as its own
        client leaving would (not once it is a task or parked again)."""
        self.calls.cancel_continued(message)

    async def serve_forwarded_post(
        self, runner: SessionRunner, message: forwarding.ForwardedPost
    ) -> forwarding.Reply | None:
        """A 2025-11-25 task request another replica received for a session held here."""
        return await legacy_remote.serve_forwarded(self.legacy, runner, message)

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
