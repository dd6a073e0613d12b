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

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import structlog
from aiohttp import web

from proxy import forwarding
from proxy.context import ProxyContext
from proxy.core import follow, jsonrpc, reqstate
from proxy.core.admission import check_modern_draining
from proxy.core.era import (
    ModernRequest,
    check_param_headers,
    check_request,
    invalid_params,
    method_not_found,
    tasks_capability_missing,
    upstream_params,
)
from proxy.core.errors import BadRequest, Overloaded, ProxyError, answer_with_error, error_object
from proxy.core.jsonrpc import Kind, Message
from proxy.core.modern_errors import modern_error
from proxy.core.modern_results import discover_result, final_answer, input_required_result
from proxy.core.modern_routes import Route, route
from proxy.core.protocol import INTERNAL_ERROR
from proxy.core.taskrecord import created, detailed
from proxy.core.tool_policy import FILTERED_LISTS, Refuse, View
from proxy.modern import legacy_remote
from proxy.modern.call import CallRun
from proxy.modern.context import ModernContext
from proxy.modern.hub import Hub
from proxy.modern.legacy_remote import RemoteLegacyTasks
from proxy.modern.legacy_tasks import LegacyTasks
from proxy.modern.listen import listen
from proxy.modern.pool import UpstreamPool
from proxy.modern.reply import Reply
from proxy.modern.retry_forward import forward_retry, serve_retry
from proxy.modern.tasks import TaskKeeper
from proxy.modern.tools import ToolIndex, task_support
from proxy.replicas import Relay
from proxy.runtime import SessionRunner
from proxy.servers import Server
from proxy.store.base import StoreError

log = structlog.get_logger("proxy.modern")


class ModernFacade:
    """Everything modern clients reach: the pool, the listeners, the tasks."""

    def __init__(self, server: Server, context: ProxyContext) -> None:
        self.server = server
        self.config = config = server.config
        self.shared = context  # the replicas exist once the store is open
        self.secret = context.settings.token_secret
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
        context.task_services.append(self.tasks)
        context.modern_sides[server.name] = self
        metrics = context.metrics
        name = server.name
        metrics.watch(metrics.tasks_running.labels(name), lambda: self.tasks.running)
        metrics.watch(metrics.modern_calls.labels(name), lambda: len(self.live))
        metrics.watch(metrics.pool_sessions.labels(name), lambda: len(self.pool.live_sessions()))
        self.tasks.on_end = lambda status: metrics.tasks_ended.labels(status).inc()
        self.live: set[CallRun] = set()  # modern calls not yet ended (parked and tasks too)
        self.parked: dict[str, CallRun] = {}
        self.continued: dict[str, CallRun] = {}  # retried calls being followed, by handle
        self.context = ModernContext(
            config=config,
            pool=self.pool,
            tasks=self.tasks,
            hub=self.hub,
            track=self.track,
            tasks_enabled=self.tasks_enabled,
        )
        self.legacy = LegacyTasks(self.context)
        self.legacy_remote = RemoteLegacyTasks(self.tasks)  # sessions other replicas hold

    def health(self) -> dict[str, Any]:
        """The modern side for ``/healthz``: what it holds right now."""
        return {
            "pool_sessions": len(self.pool.live_sessions()),
            "pool_idle": self.pool.idle_count(),
            "pool_start_waits": self.pool.start_waits,
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
        replicas = self.shared.replicas
        return replicas is not None and await replicas.owner_alive(owner)

    async def _forward(self, owner: str, message: forwarding.TaskAction) -> forwarding.Reply:
        replicas = self.shared.replicas
        if replicas is None:
            return forwarding.UnknownTask()
        return await replicas.forward(owner, message)

    async def close(self) -> None:
        self.hub.close_all()
        for run in list(self.parked.values()):
            run.cancel("the proxy is shutting down")
        self.parked.clear()
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
                return await self._retry(msg, client, principal, state, headers, reply)
            case Route.START:
                return await self._start(msg, client, principal, headers, reply, view)
            case Route.NOT_FOUND:
                raise method_not_found(method)

    # ------------------------------------------------------------------ discovery
    async def discover(self) -> dict[str, Any]:
        return discover_result(
            await self.pool.info(),
            tasks_enabled=self.tasks_enabled,
            cache_ttl_ms=self.config.modern.cache_ttl_ms,
        )

    # ------------------------------------------------------------------ calls
    async def _start(
        self,
        msg: Message,
        client: ModernRequest,
        principal: str | None,
        headers: Mapping[str, str],
        reply: Reply,
        view: View,
    ) -> web.StreamResponse:
        method = msg.method or ""
        params = msg.params
        decided = None if view.inert else view.request(method, params)
        if isinstance(decided, Refuse):  # as the server refuses what it does not have
            return await reply.finish(answer_with_error(msg.id, modern_error(decided.error)))
        if decided is not None:
            params = decided.applied(params)  # the server's own name
        run = CallRun(method, msg.params, client, principal)
        if method == "tools/call":
            tool = (await self.tools.get()).get(str(params.get("name")))
            if tool is not None:
                annotated = self.tools.header_params(tool)
                if annotated:
                    check_param_headers(annotated, msg.params.get("arguments"), headers)
            run.call.task_support = task_support(tool)
            if follow.needs_tasks(
                run.call.task_support, tasks_enabled=self.tasks_enabled, client_tasks=client.tasks
            ):
                raise tasks_capability_missing()
        run.upstream = params if decided is not None else None
        self.track(run)
        await self._send(run)
        return await self._follow(msg, run, reply, started=time.monotonic(), view=view)

    async def _send(self, run: CallRun) -> None:
        """Send ``run``'s request on a pooled session (anew, after URL elicitations)."""
        try:
            session = await self.pool.acquire(run.call.exclusive)
        except BaseException:
            run.fail(error_object(INTERNAL_ERROR, "no upstream session"))  # ends tracking
            raise
        params = run.upstream if run.upstream is not None else run.call.params
        session.begin(run, upstream_params(params))

    def track(self, run: CallRun) -> None:
        """Count ``run`` among the live ones until it ends; 503 past ``modern.max_calls``."""
        limit = self.config.modern.max_calls
        if len(self.live) >= limit:
            raise Overloaded(
                f"Too many modern calls at once (modern.max_calls={limit}); try again later",
                reason="too_many_calls",
            )
        self.live.add(run)

        def ended(done: CallRun) -> None:
            if done.done:
                self.live.discard(done)
                done.on_change.remove(ended)

        run.on_change.append(ended)

    async def _retry(
        self,
        msg: Message,
        client: ModernRequest,
        principal: str | None,
        state: object,
        headers: Mapping[str, str],
        reply: Reply,
    ) -> web.StreamResponse:
        method = msg.method or ""
        name = msg.params.get("uri" if method == "resources/read" else "name")
        parked = reqstate.read(self.secret, state, method, name, principal, time.time())
        replicas = self.shared.replicas
        if replicas is not None and not reqstate.served_here(parked, replicas.owner):
            assert parked.holder is not None
            holder, call = parked.holder, parked.call_id
            return await forward_retry(
                replicas, self.server.name, holder, call, msg, principal, headers, reply
            )
        run = self.parked.pop(parked.call_id, None)
        if run is None:
            raise invalid_params(
                "Invalid params: the request this requestState continues is gone "
                "(answered, expired or held by another proxy); send the request anew"
            )
        run.call.client = client
        run.call.parked_until = None
        run.answer(msg.params.get("inputResponses"))
        if run.call.unsent:  # its URL elicitations are accepted: the request goes again
            await self._send(run)
        self.continued[run.id] = run
        try:
            return await self._follow(msg, run, reply, started=time.monotonic())
        finally:
            self.continued.pop(run.id, None)

    async def _follow(
        self, msg: Message, run: CallRun, reply: Reply, started: float, view: View | None = None
    ) -> web.StreamResponse:
        """Carry out what :class:`proxy.core.follow.Follower` decides for this request
        until it answers, asks, becomes a task, or the client goes away (then the call
        is cancelled)."""
        call = run.call
        tasks = self.config.tasks
        task_at = follow.task_due(
            call,
            started,
            tasks_enabled=self.tasks_enabled,
            mode=tasks.mode,
            after_ms=tasks.after_ms,
            tasks_full=self.tasks.full(),
        )
        follower = follow.Follower(call.method, task_at)
        try:
            while True:
                if not follower.gathering:
                    notes = call.take_notes()
                    if notes:
                        await reply.stream(notes)
                step = follower.decide(
                    call, time.monotonic(), gone=reply.gone, keepalive_in=reply.due()
                )
                match step:
                    case follow.Wait(seconds):
                        await run.changed(seconds)
                    case follow.Keepalive():
                        await reply.stream([])
                    case follow.Answer():
                        return await self._answer(reply, msg, run, view)
                    case follow.RefuseInput():
                        run.answer({key: None for key in call.pending})  # refused upstream
                    case follow.AskClient():
                        return await self._input_required(reply, msg, run)
                    case follow.AskUrl(again):  # -32042: ask, then send the request anew
                        fresh = CallRun(again.method, again.params, again.client, run.principal)
                        fresh.call = again
                        self.track(fresh)
                        return await self._input_required(reply, msg, fresh)
                    case follow.BecomeTask():
                        try:
                            record = await self.tasks.adopt(run, "modern")
                        except StoreError as exc:  # no task without its record: stay plain
                            log.warning("task_not_created", error=str(exc))
                            follower.no_task()
                            continue
                        return await reply.finish(jsonrpc.ok_response(msg.id, created(record)))
                    case follow.ClientGone():
                        run.cancel("the client closed the request's response stream")
                        return reply.sse or web.Response(status=499)
        except (ConnectionError, RuntimeError) as exc:
            log.debug("modern_client_gone", method=msg.method, error=repr(exc))
            if call.task_id is None and call.parked_until is None:
                run.cancel("the client closed the request's response stream")
            return reply.sse or web.Response(status=499)
        except BaseException:  # cancelled, or a fault: the call must not run on unowned
            if call.task_id is None and call.parked_until is None:
                run.cancel("the client closed the request's response stream")
            raise

    def _server_info(self) -> Any:
        return (self.pool.init_result or {}).get("serverInfo")

    async def _answer(
        self, reply: Reply, msg: Message, run: CallRun, view: View | None
    ) -> web.StreamResponse:
        message, status = final_answer(
            run.call,
            msg.id,
            cache_ttl_ms=self.config.modern.cache_ttl_ms,
            server_info=self._server_info(),
        )
        method = run.call.method
        filtered = view is not None and not view.inert and method in FILTERED_LISTS
        if filtered and view is not None and "result" in message:  # shown, by its names
            message = {**message, "result": view.answer(method, message["result"])}
        return await reply.finish(message, status=status)

    async def _input_required(self, reply: Reply, msg: Message, run: CallRun) -> web.StreamResponse:
        ttl = self.config.modern.input_ttl_seconds
        expires = time.time() + ttl
        method = msg.method or ""
        name = msg.params.get("uri" if method == "resources/read" else "name")
        holder = self.shared.owner if self.shared.replicas is not None else None
        state = reqstate.mint(self.secret, run.id, method, name, run.principal, expires, holder)
        run.call.parked_until = expires
        self.parked[run.id] = run
        asyncio.get_running_loop().call_later(ttl, self._unpark, run)
        result = input_required_result(run.call, state)
        return await reply.finish(jsonrpc.ok_response(msg.id, result))

    def _unpark(self, run: CallRun) -> None:
        parked_until = run.call.parked_until
        if parked_until is not None and time.time() >= parked_until - 0.001:
            self.parked.pop(run.id, None)
            run.cancel("the client did not send the input in time (modern.input_ttl_seconds)")

    async def serve_forwarded_retry(
        self, message: forwarding.ForwardedRetry, relay: Relay | None
    ) -> forwarding.Reply:
        """A retry another replica received for a call parked here (``relay``: sends
        the asker the call's notes as they come)."""
        return await serve_retry(self.post, message, relay)

    def cancel_forwarded_retry(self, message: forwarding.RetryCancel) -> None:
        """The client of a retry forwarded here left: cancel the call, as :meth:`_follow`
        does when its own client leaves (not once it is a task or parked again)."""
        run = self.continued.get(message.call)
        call = run.call if run is not None else None
        if run is None or call is None or run.principal != message.principal:
            return
        if call.task_id is None and call.parked_until is None:
            run.cancel("the client closed the request's response stream")

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
