"""One modern call's life in this process: the pure call, where it runs, who watches it.

The decisions are :class:`proxy.core.call.Call`'s (its status table, its answers to the
server) and, once it runs on a pooled session, that session's
:class:`~proxy.core.calltable.CallTable`'s. A :class:`CallRun` only carries them out: it
hands the client's moves (answers, refusals, cancel, fail) to the session that carries the
call, and wakes whoever watches it (a client's response waits on :meth:`changed`; the task
keeper and the live-call count hook :attr:`on_change`).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any, Protocol

from proxy.core.call import Call
from proxy.core.calltable import AnswerInput, CancelCall, FailCall, RejectInput, TableEvent
from proxy.core.era import ModernRequest


class Carrier(Protocol):
    """The pooled session a call runs on (:class:`proxy.modern.pool.PooledSession`)."""

    def deliver(self, event: TableEvent) -> None: ...


class CallRun:
    """One :class:`Call` and its watchers."""

    def __init__(
        self, method: str, params: dict[str, Any], client: ModernRequest, principal: str | None
    ) -> None:
        self.call = Call(method, params, client, principal)
        # What the server is sent, when an operator's rule renamed what the client named
        # (proxy/core/tool_policy.py); None: the client's own params.
        self.upstream: dict[str, Any] | None = None
        self.carrier: Carrier | None = None
        self._changed = asyncio.Event()
        self.on_change: list[Callable[[CallRun], None]] = []

    def __repr__(self) -> str:
        return f"<CallRun {self.call!r}>"

    # ------------------------------------------------------------------ what it is
    @property
    def id(self) -> str:
        """An unguessable handle on this call (in its MRTR ``requestState``)."""
        if self.call.handle is None:
            self.call.handle = secrets.token_urlsafe(12)
        return self.call.handle

    @property
    def method(self) -> str:
        return self.call.method

    @property
    def principal(self) -> str | None:
        return self.call.principal

    @property
    def done(self) -> bool:
        return self.call.done

    @property
    def task_id(self) -> str | None:
        return self.call.task_id

    def input_requests(self) -> dict[str, dict[str, Any]]:
        return self.call.input_requests()

    # ------------------------------------------------------------------ watching
    async def changed(self, timeout: float | None) -> None:
        """Wait until something changed since the last call (or ``timeout``)."""
        changed = self._changed
        if not changed.is_set():
            if timeout is None:
                await changed.wait()
            else:  # a plain timer: cheaper than a timeout scope on this hot path
                timer = asyncio.get_running_loop().call_later(timeout, changed.set)
                try:
                    await changed.wait()
                finally:
                    timer.cancel()
        changed.clear()

    def signal(self) -> None:
        self._changed.set()
        for callback in list(self.on_change):
            callback(self)

    # ------------------------------------------------------------------ the client's moves
    def answer(self, responses: Any) -> None:
        self._act(AnswerInput(self.call, responses))

    def reject(self, key: str, error: Any) -> None:
        self._act(RejectInput(self.call, key, error))

    def cancel(self, reason: str) -> None:
        self._act(CancelCall(self.call, reason))

    def fail(self, error: dict[str, Any]) -> None:
        self._act(FailCall(self.call, error))

    def _act(self, event: AnswerInput | RejectInput | CancelCall | FailCall) -> None:
        if self.carrier is not None:
            self.carrier.deliver(event)  # the session sends and signals as its table says
            return
        # Not (yet) on a session: nothing to tell a server, only the status to move.
        match event:
            case AnswerInput(call, responses):
                changed, _ = call.answer(responses)
            case RejectInput(call, key, error):
                changed, _ = call.reject(key, error)
            case CancelCall(call, reason):
                changed, _ = call.cancel(reason)
            case FailCall(call, error):
                changed, _ = call.fail(error)
        if changed:
            self.signal()
