"""``subscriptions/listen``: change notifications for modern clients.

A listener is one open ``subscriptions/listen`` response stream with its filter
(``basic/patterns/subscriptions.mdx``). The upstream's ``list_changed`` and
``resources/updated`` notifications, from any pooled session, reach the listeners whose
filter asks for them, tagged with ``_meta["io.modelcontextprotocol/subscriptionId"]``
(the listen request's id). The same change reported by several pooled sessions (one
server process each) within :data:`DEDUP_SECONDS` is delivered once.

Resource subscriptions are made upstream on the listeners' behalf: ``resources/subscribe``
on every pooled session (and each new one) for the union of the URIs listeners name,
``resources/unsubscribe`` when the last listener of a URI leaves. With the Tasks
extension, ``taskIds`` opt in to ``notifications/tasks`` for those tasks.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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
from proxy.core.errors import ProxyError
from proxy.core.jsonrpc import Message
from proxy.downstream.auth import principal_of
from proxy.modern.pool import PooledSession, UpstreamPool
from proxy.modern.reply import Reply

if TYPE_CHECKING:
    from proxy.modern.endpoint import ModernFacade

log = structlog.get_logger("proxy.modern")

DEDUP_SECONDS = 0.25
_MAX_QUEUED = 10_000
_FLAGS = {
    "notifications/tools/list_changed": "toolsListChanged",
    "notifications/prompts/list_changed": "promptsListChanged",
    "notifications/resources/list_changed": "resourcesListChanged",
}
_SUBSCRIBE_TIMEOUT = 10.0


@dataclass(eq=False)
class Listener:
    subscription_id: Any
    flags: set[str]
    uris: set[str]
    task_ids: set[str]
    queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)

    def push(self, method: str, params: dict[str, Any]) -> None:
        if self.queue.qsize() >= _MAX_QUEUED:
            return
        meta = dict(params.get("_meta") or {})
        meta[META_SUBSCRIPTION] = self.subscription_id
        self.queue.put_nowait(
            {"jsonrpc": "2.0", "method": method, "params": {**params, "_meta": meta}}
        )


def honoured(filter_: dict[str, Any], capabilities: dict[str, Any]) -> dict[str, Any]:
    """The part of a filter the upstream can serve (what the acknowledgement lists)."""
    out: dict[str, Any] = {}
    for area, flag in (
        ("tools", "toolsListChanged"),
        ("prompts", "promptsListChanged"),
        ("resources", "resourcesListChanged"),
    ):
        declared = capabilities.get(area)
        if filter_.get(flag) is True and isinstance(declared, dict) and declared.get("listChanged"):
            out[flag] = True
    uris = filter_.get("resourceSubscriptions")
    resources = capabilities.get("resources")
    if isinstance(uris, list) and isinstance(resources, dict) and resources.get("subscribe"):
        out["resourceSubscriptions"] = [u for u in uris if isinstance(u, str)]
    return out


class Hub:
    """Every listener of this process, and the upstream subscriptions they need."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.listeners: set[Listener] = set()
        self._uris: Counter[str] = Counter()
        self._recent: dict[str, float] = {}
        pool.on_broadcast = self.publish
        pool.on_session = self._session_started

    def add(self, listener: Listener) -> None:
        self.listeners.add(listener)
        for uri in listener.uris:
            self._uris[uri] += 1
            if self._uris[uri] == 1:
                self._everywhere("resources/subscribe", uri)

    def remove(self, listener: Listener) -> None:
        if listener not in self.listeners:
            return
        self.listeners.discard(listener)
        for uri in listener.uris:
            self._uris[uri] -= 1
            if self._uris[uri] <= 0:
                del self._uris[uri]
                self._everywhere("resources/unsubscribe", uri)

    def publish(self, msg: Message) -> None:
        key = msg.encoded()
        now = time.monotonic()
        key_text = key.decode(errors="replace")
        if now - self._recent.get(key_text, -1e9) < DEDUP_SECONDS:
            return
        self._recent[key_text] = now
        if len(self._recent) > 1024:
            self._recent = {k: t for k, t in self._recent.items() if now - t < DEDUP_SECONDS}
        method = msg.method or ""
        params = {k: v for k, v in msg.params.items() if k != "_meta"}
        for listener in list(self.listeners):
            if method == "notifications/resources/updated":
                if params.get("uri") in listener.uris:
                    listener.push(method, params)
            elif _FLAGS.get(method) in listener.flags:
                listener.push(method, params)

    def publish_task(self, task: dict[str, Any]) -> None:
        for listener in list(self.listeners):
            if task.get("taskId") in listener.task_ids:
                listener.push("notifications/tasks", task)

    def close_all(self) -> None:
        for listener in list(self.listeners):
            listener.queue.put_nowait(None)

    # ------------------------------------------------------------------ upstream side
    def _session_started(self, session: PooledSession) -> None:
        for uri in list(self._uris):
            self.pool._own(self._subscribe(session, "resources/subscribe", uri))

    def _everywhere(self, method: str, uri: str) -> None:
        for session in self.pool.live_sessions():
            self.pool._own(self._subscribe(session, method, uri))

    async def _subscribe(self, session: PooledSession, method: str, uri: str) -> None:
        try:
            answer = await session.ask(method, {"uri": uri}, _SUBSCRIBE_TIMEOUT)
        except ProxyError as exc:
            log.warning("upstream_subscribe_failed", method=method, error=exc.message)
            return
        if answer.is_error:
            log.warning("upstream_subscribe_refused", method=method, error=answer.raw["error"])


async def listen(
    facade: ModernFacade, request: web.Request, msg: Message, client: ModernRequest
) -> web.StreamResponse:
    """Serve one ``subscriptions/listen`` request: acknowledge, then stream what its filter
    asks for until the client leaves or the proxy shuts down."""
    wanted = msg.params.get("notifications")
    if not isinstance(wanted, dict):
        raise invalid_params("Invalid params: notifications must be an object")
    task_ids = wanted.get("taskIds")
    if task_ids is not None:
        if not (facade.tasks_enabled and client.tasks):
            raise tasks_capability_missing()
        if not isinstance(task_ids, list) or not all(isinstance(t, str) for t in task_ids):
            raise invalid_params("Invalid params: notifications.taskIds must be strings")
    init = await facade.pool.info()
    accepted = honoured(wanted, init.get("capabilities") or {})
    known: list[str] = []
    for task_id in task_ids or []:
        with contextlib.suppress(ModernError):
            await facade.tasks.record(task_id, principal_of(request))
            known.append(task_id)
    if task_ids is not None:
        accepted["taskIds"] = known
    listener = Listener(
        msg.id,
        {flag for flag, on in accepted.items() if on is True},
        set(accepted.get("resourceSubscriptions", [])),
        set(known),
    )
    reply = Reply(request, facade.config.sse.keepalive_seconds)
    ack = {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": {"notifications": accepted, "_meta": {META_SUBSCRIPTION: msg.id}},
    }
    await facade.pool.hold_listening()
    facade.hub.add(listener)
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
        facade.hub.remove(listener)
        facade.pool.release_listening()
    return reply.sse or web.Response(status=499)


def _ends_listening(item: dict[str, Any] | None) -> bool:
    return item is None  # None: the proxy ends the subscription
