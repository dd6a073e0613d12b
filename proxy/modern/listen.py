"""``subscriptions/listen``: change notifications for modern clients.

One listen request: acknowledge the part of its filter the upstream can serve
(:func:`proxy.core.subscriptions.honoured`), then stream what the filter asks for, from every
pooled session (:class:`proxy.modern.hub.Hub`), until the client leaves or the proxy shuts
down (``basic/patterns/subscriptions.mdx``). With the Tasks extension, ``taskIds`` opt in
to ``notifications/tasks`` for those tasks.
"""

from __future__ import annotations

import contextlib
from typing import Any

import structlog
from aiohttp import web

from proxy.core import jsonrpc
from proxy.core.era import (
    META_SUBSCRIPTION,
    ModernError,
    ModernRequest,
    invalid_params,
    tasks_capability_missing,
)
from proxy.core.jsonrpc import Message
from proxy.core.subscriptions import honoured
from proxy.core.tool_policy import OPEN, View
from proxy.modern.context import ModernContext
from proxy.modern.hub import Listener
from proxy.modern.reply import Reply

log = structlog.get_logger("proxy.modern")
EVERYTHING = OPEN.view(None)


async def listen(
    context: ModernContext,
    reply: Reply,
    msg: Message,
    client: ModernRequest,
    principal: str | None,
    view: View = EVERYTHING,
) -> web.StreamResponse:
    """Serve one ``subscriptions/listen`` request: acknowledge, then stream what its filter
    asks for until the client leaves or the proxy shuts down. A resource ``view`` hides
    (docs/tools.md) is not subscribed to, and not acknowledged."""
    wanted = msg.params.get("notifications")
    if not isinstance(wanted, dict):
        raise invalid_params("Invalid params: notifications must be an object")
    task_ids = wanted.get("taskIds")
    if task_ids is not None:
        if not (context.tasks_enabled and client.tasks):
            raise tasks_capability_missing()
        if not isinstance(task_ids, list) or not all(isinstance(t, str) for t in task_ids):
            raise invalid_params("Invalid params: notifications.taskIds must be strings")
    init = await context.pool.info()
    accepted = honoured(wanted, init.get("capabilities") or {})
    if "resourceSubscriptions" in accepted and not view.inert:
        accepted["resourceSubscriptions"] = view.uris(accepted["resourceSubscriptions"])
    known: list[str] = []
    for task_id in task_ids or []:
        with contextlib.suppress(ModernError):
            await context.tasks.record(task_id, principal)
            known.append(task_id)
    if task_ids is not None:
        accepted["taskIds"] = known
    listener = Listener(
        msg.id,
        {flag for flag, on in accepted.items() if on is True},
        set(accepted.get("resourceSubscriptions", [])),
        set(known),
    )
    ack = {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": accepted, "_meta": {META_SUBSCRIPTION: msg.id}},
    }
    await context.pool.hold_listening()
    context.hub.add(listener)
    try:
        await reply.stream([ack])
        while True:
            batch = await reply.next_batch(listener.queue, _ends_listening)
            if not batch:  # the client is gone
                break
            notes = [item for item in batch if item is not None]
            if notes:
                await reply.stream(notes)
            if batch[-1] is None:  # the proxy ends the subscription gracefully
                end = {"resultType": "complete", "_meta": {META_SUBSCRIPTION: msg.id}}
                return await reply.finish(jsonrpc.ok_response(msg.id, end))
    except (ConnectionError, RuntimeError) as exc:
        log.debug("listener_gone", error=repr(exc))
    finally:
        context.hub.remove(listener)
        context.pool.release_listening()
    return reply.sse or web.Response(status=499)


def _ends_listening(item: dict[str, Any] | None) -> bool:
    return item is None  # None: the proxy ends the subscription
