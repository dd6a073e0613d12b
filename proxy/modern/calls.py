"""The modern calls of one server: each run on a pooled upstream session and followed to
its answer (:mod:`proxy.core.follow` decides each step), parked for the client's input
(``input_required`` with a signed ``requestState``), continued on its retry, or adopted
as a task. :mod:`proxy.modern.call` is one call; this module holds the live ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import structlog
from aiohttp import web

from proxy.config import Config
from proxy.context import ProxyContext
from proxy.core import follow, jsonrpc, reqstate
from proxy.core.era import (
    ModernRequest,
    check_param_headers,
    invalid_params,
    tasks_capability_missing,
    upstream_params,
)
from proxy.core.errors import LostReason, Overloaded, answer_with_error, error_object, lost_answer
from proxy.core.jsonrpc import Message
from proxy.core.modern_errors import modern_error
from proxy.core.modern_results import final_answer, input_required_result
from proxy.core.protocol import INTERNAL_ERROR
from proxy.core.taskrecord import created
from proxy.core.tool_policy import FILTERED_LISTS, Refuse, View
from proxy.forwarding import RetryCancel
from proxy.modern.call import CallRun
from proxy.modern.pool import UpstreamPool
from proxy.modern.reply import Reply
from proxy.modern.retry_forward import forward_retry
from proxy.modern.tasks import TaskKeeper
from proxy.modern.tools import ToolIndex, task_support
from proxy.store.base import StoreError

log = structlog.get_logger("proxy.modern")


class ModernCalls:
    """The calls a server's modern side runs, until each ends: live (counted against
    ``modern.max_calls``), parked for input, or continued by a retry."""

    def __init__(
        self,
        config: Config,
        shared: ProxyContext,
        server_name: str,
        pool: UpstreamPool,
        tools: ToolIndex,
        tasks: TaskKeeper,
    ) -> None:
        self.config = config
        self.shared = shared  # the replicas exist once the store is open
        self.secret = shared.settings.token_secret
        self.server_name = server_name
        self.pool = pool
        self.tools = tools
        self.tasks = tasks
        self.tasks_enabled = config.tasks.enabled
        self.live: set[CallRun] = set()  # modern calls not yet ended (parked and tasks too)
        self.parked: dict[str, CallRun] = {}
        self.continued: dict[str, CallRun] = {}  # retried calls being followed, by handle

    def close(self) -> None:
        """Cancel the calls parked for input (the proxy is shutting down)."""
        for run in list(self.parked.values()):
            run.cancel("the proxy is shutting down")
        self.parked.clear()

    async def start(
        self,
        msg: Message,
        client: ModernRequest,
        principal: str | None,
        headers: Mapping[str, str],
        reply: Reply,
        view: View,
    ) -> web.StreamResponse:
        """Run a new request of ``principal`` upstream and answer it on ``reply``."""
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
        return await self.follow(msg, run, reply, started=time.monotonic(), view=view)

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

    async def retry(
        self,
        msg: Message,
        client: ModernRequest,
        principal: str | None,
        state: object,
        headers: Mapping[str, str],
        reply: Reply,
    ) -> web.StreamResponse:
        """Continue the call ``state`` names with the client's input responses: here, or on
        the replica holding it (:func:`proxy.modern.retry_forward.forward_retry`)."""
        method = msg.method or ""
        name = msg.params.get("uri" if method == "resources/read" else "name")
        parked = reqstate.read(self.secret, state, method, name, principal, time.time())
        replicas = self.shared.replicas
        if replicas is not None and not reqstate.served_here(parked, replicas.owner):
            assert parked.holder is not None
            holder, call = parked.holder, parked.call_id
            return await forward_retry(
                replicas, self.server_name, holder, call, msg, principal, headers, reply
            )
        run = self.parked.pop(parked.call_id, None)
        if run is None and parked.holder not in (None, self.shared.owner):
            # Minted by an earlier life of this proxy (on a store that outlives it, with
            # its secret): the call died with it, as a task's does (proxy_restarted).
            log.info("mrtr_holder_restarted", holder=parked.holder)
            lost = lost_answer(
                msg.id,
                LostReason.PROXY_RESTARTED,
                "the proxy restarted while this request waited for input; send it anew",
            )
            return await reply.finish(lost)
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
            return await self.follow(msg, run, reply, started=time.monotonic())
        finally:
            self.continued.pop(run.id, None)

    async def follow(
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
        holder = self.shared.owner  # this process: another replica, or a later life
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

    def cancel_continued(self, message: RetryCancel) -> None:
        """The client of a retry forwarded here left: cancel the call, as :meth:`follow`
        does when its own client leaves (not once it is a task or parked again)."""
        run = self.continued.get(message.call)
        call = run.call if run is not None else None
        if run is None or call is None or run.principal != message.principal:
            return
        if call.task_id is None and call.parked_until is None:
            run.cancel("the client closed the request's response stream")
