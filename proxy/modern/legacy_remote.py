"""2025-11-25 tasks of a session another replica holds (issue 19; replicas on Redis).

The proxy offers ``tasks`` to a legacy client (:mod:`proxy.modern.legacy_tasks`); behind a
balancer without stickiness, the client's task requests reach any replica. Without this,
a replica that does not hold the session forwarded them to the holder's session, whose
server answered ``-32601`` for a capability the proxy advertised. Now:

- **Any replica** serves ``tasks/get``, ``tasks/result`` and ``tasks/cancel`` from the
  task's record in the shared store (:class:`RemoteLegacyTasks`): ``tasks/get`` the
  record as it is; ``tasks/result`` at once for a finished task, else it follows the
  record until the task ends, sending the task's questions on its response as the holder
  would (the client's answers, POSTed anywhere, reach the holder, which runs the task);
  ``tasks/cancel`` goes to the replica running the task
  (:class:`~proxy.forwarding.TaskCancel`). A record whose replica died reads ``failed``
  (``owner_lost``), as on the holder. The record names the session and its principal
  (:func:`~proxy.core.legacy_tasks.task_principal`): another session's, or another
  principal's, is not served here (the holder then refuses as it always did).
- **The holder** serves what else the façade serves, forwarded as a POST (task creation,
  ``tasks/list``, the client's answers to a task's questions): :func:`serve_forwarded`
  answers it as the façade does on its own endpoint, as an
  :class:`~proxy.forwarding.Answered` (or 202, :class:`~proxy.forwarding.NoStream`). It
  never waits on the asker's behalf: a ``tasks/result`` of a running task that reaches it
  (the asker could not read the record) gets 503 ``owner_unreachable``, asked again.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from proxy.core import jsonrpc
from proxy.core.era import ModernError, invalid_params
from proxy.core.jsonrpc import Kind, Message
from proxy.core.legacy_tasks import REMOTE_METHODS, final, question, task_principal
from proxy.core.taskrecord import TERMINAL, legacy_task
from proxy.forwarding import Answered, ForwardedPost, NoStream, Refused, Reply
from proxy.modern.legacy_tasks import LegacyTasks
from proxy.modern.reply import Reply as HttpReply
from proxy.modern.retry_forward import GatheredReply
from proxy.modern.tasks import TaskKeeper
from proxy.replicas import OwnerUnreachable
from proxy.runtime import SessionRunner

FOLLOW_SECONDS = 0.1
"""How often a ``tasks/result`` on a replica that does not run the task reads its record."""


class RemoteLegacyTasks:
    """Task requests of legacy sessions held by other replicas, served from the store."""

    def __init__(self, keeper: TaskKeeper) -> None:
        self.keeper = keeper

    @staticmethod
    def claims(messages: list[Message], batch: bool) -> bool:
        """Whether ``messages`` are a request this may serve (then :meth:`post` decides)."""
        msg = messages[0] if len(messages) == 1 and not batch else None
        return msg is not None and msg.kind is Kind.REQUEST and msg.method in REMOTE_METHODS

    async def post(
        self,
        session_id: str,
        principal: str | None,
        messages: list[Message],
        batch: bool,
        reply: HttpReply,
    ) -> web.StreamResponse | None:
        """Serve a lone task request of the session's own task; None: the holder's."""
        if not self.claims(messages, batch):
            return None
        msg = messages[0]
        owner = task_principal(session_id, principal)
        try:
            record = await self.keeper.record(msg.params.get("taskId"), owner)
        except ModernError:
            return None  # not a task of the proxy's for this session: the holder answers
        if msg.method == "tasks/get":
            return await reply.finish(jsonrpc.ok_response(msg.id, legacy_task(record)))
        if msg.method == "tasks/cancel":
            try:
                return await reply.finish(jsonrpc.ok_response(msg.id, await self._cancel(record)))
            except ModernError as exc:
                return await reply.finish(exc.to_jsonrpc(msg.id))
        return await self._result(reply, msg, record, owner)

    async def _cancel(self, record: dict[str, Any]) -> dict[str, Any]:
        if record["status"] in TERMINAL:
            raise invalid_params(f"Invalid params: the task is already {record['status']}")
        task_id, owner = record["taskId"], record["principal"]
        await self.keeper.cancel(task_id, owner)  # to the replica running it
        return legacy_task(await self.keeper.record(task_id, owner))

    async def _result(
        self, reply: HttpReply, msg: Message, record: dict[str, Any], owner: str
    ) -> web.StreamResponse:
        """The task's answer once it ends; meanwhile its questions, as the holder sends
        them (each once), and keepalives."""
        task_id = record["taskId"]
        sent: set[str] = set()
        try:
            while record["status"] not in TERMINAL:
                asks = record.get("inputRequests") or {}
                new = [question(task_id, k, r) for k, r in asks.items() if k not in sent]
                sent.update(asks)
                if new:
                    await reply.stream(new)
                elif reply.due() <= 0:
                    await reply.stream([])
                if reply.gone:
                    return reply.sse or web.Response(status=499)
                await asyncio.sleep(min(FOLLOW_SECONDS, max(0.0, reply.due())))
                record = await self.keeper.record(task_id, owner)
        except (ConnectionError, RuntimeError):  # the client left; the task goes on
            return reply.sse or web.Response(status=499)
        return await reply.finish(final(msg.id, record))


async def serve_forwarded(
    legacy: LegacyTasks, runner: SessionRunner, message: ForwardedPost
) -> Reply | None:
    """The holder's side: a forwarded POST the façade serves (None: the session's)."""
    if not runner.session.offers_tasks:
        return None
    messages, batch = jsonrpc.parse_body(message.body)
    gathered = GatheredReply(waits=False)  # the asker serves the waits itself
    served = await legacy.post(runner, messages, batch, gathered)
    if served is None:
        return None
    if gathered.answered:
        return Answered(gathered.status, gathered.messages)
    if message.request_id is not None:  # a tasks/result the asker could not serve itself
        busy = OwnerUnreachable("the task runs on; ask for its result again")
        return Refused(busy.http_status, busy.to_jsonrpc(message.request_id))
    return NoStream()  # the client's answer to a task's question: 202
