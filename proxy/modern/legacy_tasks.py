"""The 2025-11-25 Tasks shape for legacy clients, over the same engine and records.

A legacy session whose client declared ``capabilities.tasks`` (and whose server offers no
tasks of its own: :mod:`proxy.core.legacy_tasks`) may send ``tools/call`` with
``params.task``. The proxy runs that call on its pooled upstream sessions, as a task
(:class:`~proxy.modern.tasks.TaskKeeper`, era ``legacy``), and answers at once with
``{"task": Task}``. Then, on the same session:

- ``tasks/get`` → the ``Task``; ``tasks/list`` → this session's tasks;
- ``tasks/result`` → blocks until the task ends, then exactly what the call returned
  (result, or its JSON-RPC error), with ``_meta["io.modelcontextprotocol/related-task"]``.
  While it waits, what the server asks the client (elicitation, sampling, roots) is sent
  on that response as server→client requests (ids ``mrp-task:<taskId>:<key>``, the
  related-task ``_meta``); the client's answers are POSTed like any response;
- ``tasks/cancel`` → ``cancelled`` before the answer; ``-32602`` for a finished task.

Tasks belong to the session that created them (another session gets ``-32602``). The
call runs on a pooled session, not on the client's own upstream session: a stdio server's
per-session state is not shared with it (docs/modern.md). ``notifications/tasks/status``
(optional in 2025-11-25) is not sent: clients poll.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from proxy.core import jsonrpc
from proxy.core.era import ModernError, ModernRequest, invalid_params
from proxy.core.errors import Overloaded, answer_with_error, error_object
from proxy.core.jsonrpc import Kind, Message
from proxy.core.legacy_tasks import answered, final, question, task_principal
from proxy.core.protocol import INTERNAL_ERROR, SESSION_HEADER
from proxy.core.sse import LIVENESS_SECONDS
from proxy.core.taskrecord import TERMINAL, legacy_task
from proxy.core.tool_policy import Refuse
from proxy.modern.call import CallRun
from proxy.modern.context import ModernContext
from proxy.modern.reply import Reply
from proxy.runtime import SessionRunner

_TASK_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/list", "tasks/cancel"})


class LegacyTasks:
    """The 2025-11-25 façade of one process."""

    def __init__(self, context: ModernContext) -> None:
        self.context = context
        self.keeper = context.tasks
        self.by_session: dict[str, list[str]] = {}

    @staticmethod
    def principal(runner: SessionRunner) -> str:
        return task_principal(runner.session_id, runner.principal)

    async def post(
        self, runner: SessionRunner, messages: list[Message], batch: bool, reply: Reply
    ) -> web.StreamResponse | None:
        """Serve ``messages`` on ``reply`` if they are the façade's; None lets the session
        have them."""
        if batch or len(messages) != 1:
            return None
        msg = messages[0]
        headers = {SESSION_HEADER: runner.session_id}
        if msg.kind is Kind.RESPONSE:
            target = answered(msg.id)
            if target is None:
                return None
            self._answer(msg, runner, *target)
            return web.Response(status=202, headers=headers)
        if msg.kind is not Kind.REQUEST:
            return None
        method = msg.method or ""
        reply.add_headers(headers)
        if method == "tools/call" and isinstance(msg.params.get("task"), dict):
            view = runner.session.view  # the tools this session may call (docs/tools.md)
            decided = None if view.inert else view.request(method, msg.params)
            if isinstance(decided, Refuse):
                return await reply.finish(answer_with_error(msg.id, decided.error))
            params = msg.params if decided is None else decided.applied(msg.params)
            result = await self._create(runner, msg, params)
        elif method == "tasks/result":
            return await self._result(reply, runner, msg)
        elif method in _TASK_METHODS:
            result = await self._serve(runner, method, msg.params)
        else:
            return None
        return await reply.finish(jsonrpc.ok_response(msg.id, result))

    # ------------------------------------------------------------------ requests
    async def _create(
        self, runner: SessionRunner, msg: Message, asked: dict[str, Any]
    ) -> dict[str, Any]:
        session = runner.session
        client = ModernRequest(
            version=session.protocol_version or "2025-11-25",
            capabilities=session.client_capabilities,
            client_info=None,
            log_level=None,
            progress_token=None,
        )
        params = {k: v for k, v in asked.items() if k != "task"}
        call = CallRun("tools/call", params, client, self.principal(runner))
        if self.keeper.full():
            limit = self.keeper.settings.max_running
            raise Overloaded(
                f"Too many tasks at once (tasks.max_running={limit}); try again later",
                reason="too_many_tasks",
            )
        self.context.track(call)
        try:
            pooled = await self.context.pool.acquire(exclusive=True)
            pooled.begin(call, params)
            ttl = msg.params["task"].get("ttl")
            record = await self.keeper.adopt(
                call,
                "legacy",
                ttl_ms=ttl if isinstance(ttl, int) and ttl > 0 else None,
                patient=True,  # the call has begun: wait for the store, not refuse at once
            )
        except BaseException:  # no task: nothing may run on for it
            call.cancel("the task could not be created")
            call.fail(error_object(INTERNAL_ERROR, "the task could not be created"))
            raise
        self.by_session.setdefault(runner.session_id, []).append(record["taskId"])
        return {"task": legacy_task(record)}

    async def _serve(self, runner: SessionRunner, method: str, params: dict[str, Any]) -> Any:
        principal = self.principal(runner)
        if method == "tasks/list":
            tasks = []
            for task_id in list(self.by_session.get(runner.session_id, [])):
                try:
                    tasks.append(legacy_task(await self.keeper.record(task_id, principal)))
                except ModernError:  # expired: no longer listed
                    self.by_session[runner.session_id].remove(task_id)
            return {"tasks": tasks}
        wanted = params.get("taskId")
        record = await self.keeper.record(wanted, principal)
        if method == "tasks/cancel":
            if record["status"] in TERMINAL:
                status = record["status"]
                raise invalid_params(f"Invalid params: the task is already {status}")
            await self.keeper.cancel(wanted, principal)
            record = await self.keeper.record(wanted, principal)
        return legacy_task(record)

    async def _result(
        self, reply: Reply, runner: SessionRunner, msg: Message
    ) -> web.StreamResponse:
        principal = self.principal(runner)
        task_id = msg.params.get("taskId")
        record = await self.keeper.record(task_id, principal)
        call = self.keeper.calls.get(record["taskId"])
        if call is not None:
            await self._wait(reply, call, record["taskId"])
            if reply.gone and not call.done:
                return reply.sse or web.Response(status=499)
            record = await self.keeper.record(task_id, principal)
        return await reply.finish(final(msg.id, record))

    async def _wait(self, reply: Reply, call: CallRun, task_id: str) -> None:
        """Until ``call`` ends (or the client leaves): pass on what it asks the client."""
        woken = asyncio.Event()

        def wake(_: CallRun) -> None:
            woken.set()

        call.on_change.append(wake)
        sent: set[str] = set()
        try:
            while not call.done:
                asks = [
                    question(task_id, key, request)
                    for key, request in call.input_requests().items()
                    if key not in sent
                ]
                if asks:
                    sent.update(key for key, _ in call.input_requests().items())
                    await reply.stream(asks)
                if reply.gone:
                    return
                if reply.due() <= 0:
                    await reply.stream([])
                try:
                    async with asyncio.timeout(min(LIVENESS_SECONDS, max(0.0, reply.due()))):
                        await woken.wait()
                except TimeoutError:
                    pass
                woken.clear()
        except (ConnectionError, RuntimeError):
            return  # the client left; the task goes on
        finally:
            if wake in call.on_change:
                call.on_change.remove(wake)

    def _answer(self, msg: Message, runner: SessionRunner, task_id: str, key: str) -> None:
        """The client's answer to a request a task's call made of it."""
        call = self.keeper.calls.get(task_id)
        if call is None or call.principal != self.principal(runner):
            return  # gone, or not this session's: dropped
        if msg.is_error:
            call.reject(key, msg.raw.get("error"))
        else:
            call.answer({key: msg.raw.get("result")})
