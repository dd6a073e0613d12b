"""The listeners of ``subscriptions/listen`` and the upstream subscriptions they need.

A listener is one open ``subscriptions/listen`` response stream with its filter
(``basic/patterns/subscriptions.mdx``). The upstream's ``list_changed`` and
``resources/updated`` notifications, from any pooled session, reach the listeners whose
filter asks for them, tagged with ``_meta["io.modelcontextprotocol/subscriptionId"]``
(the listen request's id). Which listener wants what, and the dedup of one change
reported by several pooled sessions, are :mod:`proxy.core.subscriptions`' rules.

Resource subscriptions are made upstream on the listeners' behalf: ``resources/subscribe``
on every pooled session (and each new one) for the union of the URIs listeners name,
``resources/unsubscribe`` when the last listener of a URI leaves.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import structlog

from proxy.core.errors import ProxyError
from proxy.core.jsonrpc import Message
from proxy.core.subscriptions import Dedup, Filter, tagged
from proxy.modern.pool import UpstreamPool
from proxy.modern.pooled_session import PooledSession

log = structlog.get_logger("proxy.modern")

_MAX_QUEUED = 10_000
_SUBSCRIBE_TIMEOUT = 10.0


@dataclass(eq=False)
class Listener(Filter):
    """One open listen stream: its filter, and the queue its response is written from."""

    queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=asyncio.Queue)

    def push(self, method: str, params: dict[str, Any]) -> None:
        if self.queue.qsize() < _MAX_QUEUED:
            self.queue.put_nowait(tagged(method, params, self.subscription_id))


class Hub:
    """Every listener of this process, and the upstream subscriptions they need."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.listeners: set[Listener] = set()
        self._uris: Counter[str] = Counter()
        self._dedup = Dedup()
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
        if not self._dedup.first(msg.encoded().decode(errors="replace"), time.monotonic()):
            return
        method = msg.method or ""
        params = {k: v for k, v in msg.params.items() if k != "_meta"}
        for listener in list(self.listeners):
            if listener.wants(method, params):
                listener.push(method, params)

    def publish_task(self, task: dict[str, Any]) -> None:
        for listener in list(self.listeners):
            if listener.wants("notifications/tasks", task):
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
