"""One request of a modern client, running on a pooled upstream session.

A :class:`Call` outlives the HTTP request that started it in two ways: when the server
asks the client something (it waits, ``input_required``, for the client's retry with
``inputResponses``: MRTR), and when it became a task (it runs until it completes, fails,
is cancelled or its task expires). Whoever watches it (a client's response, the task
keeper) waits on :meth:`changed`; what the server said for the client meanwhile
(progress, log messages) is in :attr:`notes`.

Status: ``working`` → (``input_required`` ⇄ ``working``)* → ``completed`` | ``failed``
| ``cancelled``, as the Tasks extension names them.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from proxy.core import jsonrpc
from proxy.core.era import ModernRequest, log_wanted
from proxy.core.jsonrpc import Message
from proxy.core.protocol import SERVER_ERROR

if TYPE_CHECKING:
    from proxy.modern.pool import PooledSession

# Server→client requests a call may carry, and the client capability each needs.
INPUT_METHODS = {
    "elicitation/create": ("elicitation", "elicitation"),
    "sampling/createMessage": ("sampling", "sampling"),
    "roots/list": ("roots", "roots"),
}
# Requests during which the server may ask the client (MRTR: basic/patterns/mrtr.mdx).
ASKING = frozenset({"tools/call", "prompts/get", "resources/read"})
_ANSWERABLE = ("elicitation", "sampling", "roots")
_MAX_NOTES = 10_000  # notifications held for a client that is not reading (then dropped)
# A legacy server may name an input request's key (MRTR keys are the server's to choose;
# a legacy wire has no place for one): params._meta[KEY_HINT] on its request.
KEY_HINT = "io.github.mcp-resume-proxy/inputKey"


class Call:
    """One upstream request and what became of it."""

    def __init__(
        self, method: str, params: dict[str, Any], client: ModernRequest, principal: str | None
    ) -> None:
        self._id: str | None = None  # drawn when first needed (a parked call's handle)
        self.method = method
        self.params = params
        self.client = client  # the latest request's metadata (the retry's, after MRTR)
        self.principal = principal
        self.session: PooledSession | None = None
        self.upstream_id: int | None = None
        # A call that may make the server ask a client able to answer gets an upstream
        # session of its own (proxy/modern/pool.py): then the question is surely its.
        self.exclusive = method in ASKING and any(client.declares(c) for c in _ANSWERABLE)
        self.task_support: str | None = None  # the tool's execution.taskSupport, if known
        self.status = "working"
        self.outcome: dict[str, Any] | None = None  # the upstream's response, raw
        self.pending: dict[str, tuple[Any, dict[str, Any]]] = {}  # key -> (server id, request)
        self._keys = itertools.count(1)
        self._used_keys: set[str] = set()  # unique over the call's (and task's) life
        self.refused: dict[str, Any] = {}  # capabilities asked for, not declared
        self.notes: deque[dict[str, Any]] = deque()
        self.task_id: str | None = None
        self.parked_until: float | None = None  # input_required, waiting for a retry
        self.status_message: str | None = None
        self._changed = asyncio.Event()
        self.on_change: list[Callable[[Call], None]] = []

    # ------------------------------------------------------------------ watching
    @property
    def done(self) -> bool:
        return self.status in ("completed", "failed", "cancelled")

    @property
    def id(self) -> str:
        """An unguessable handle on this call (in its MRTR ``requestState``)."""
        if self._id is None:
            self._id = secrets.token_urlsafe(12)
        return self._id

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

    def _signal(self) -> None:
        self._changed.set()
        for callback in list(self.on_change):
            callback(self)

    def take_notes(self) -> list[dict[str, Any]]:
        notes = list(self.notes)
        self.notes.clear()
        return notes

    # ------------------------------------------------------------------ from the upstream
    def upstream_response(self, msg: Message) -> None:
        if self.done:
            return
        self.outcome = msg.raw
        self.pending.clear()
        self.status = "failed" if msg.is_error else "completed"
        self._release()
        self._signal()

    def upstream_notification(self, msg: Message) -> None:
        if self.done or self.task_id is not None:
            return  # tasks carry no progress or log messages (Tasks extension)
        raw = msg.raw
        if msg.method == "notifications/message":
            if not log_wanted(self.client.log_level, msg.params.get("level")):
                return
        elif msg.method == "notifications/progress":
            if self.client.progress_token is None:
                return
            params = dict(msg.params)
            params["progressToken"] = self.client.progress_token
            raw = {"jsonrpc": "2.0", "method": msg.method, "params": params}
        if len(self.notes) < _MAX_NOTES:
            self.notes.append(raw)
        self._signal()

    def upstream_request(self, msg: Message) -> None:
        """The server asks the client something: it becomes an input request."""
        assert self.session is not None
        method = msg.method or ""
        if self.done:
            self.session.respond_error(msg.id, SERVER_ERROR, "the request was already answered")
            return
        capability, label = INPUT_METHODS[method]
        if not self.client.declares(capability):
            # The client cannot answer it (MRTR: never send what it did not declare). The
            # server hears so, as a legacy client would say it; if the call then fails,
            # the client learns what it lacked (-32021), else it gets what the tool made.
            self.session.respond_error(msg.id, -32601, f"the client does not support {method}")
            self.refused[capability] = {}
            return
        request: dict[str, Any] = {"method": method}
        params = msg.raw.get("params")
        hint = None
        if isinstance(params, dict):
            meta = params.get("_meta")
            if isinstance(meta, dict) and KEY_HINT in meta:
                hint = meta[KEY_HINT]
                rest = {k: v for k, v in meta.items() if k != KEY_HINT}
                params = (
                    {**params, "_meta": rest}
                    if rest
                    else {k: v for k, v in params.items() if k != "_meta"}
                )
            request["params"] = params
        elif "params" in msg.raw:
            request["params"] = params
        if isinstance(hint, str) and hint and hint not in self._used_keys:
            key = hint
        else:
            key = f"{label}-{next(self._keys)}"
            while key in self._used_keys:
                key = f"{label}-{next(self._keys)}"
        self._used_keys.add(key)
        self.pending[key] = (msg.id, request)
        self.status = "input_required"
        self._signal()

    def upstream_lost(self, why: str) -> None:
        self.fail({"code": SERVER_ERROR, "message": why, "data": {"reason": "upstream_closed"}})

    # ------------------------------------------------------------------ from the client
    def input_requests(self) -> dict[str, dict[str, Any]]:
        return {key: request for key, (_, request) in self.pending.items()}

    def answer(self, responses: Any) -> None:
        """Deliver ``inputResponses``: keys not pending (never issued, answered) are ignored."""
        if not isinstance(responses, dict) or self.done or self.session is None:
            return
        for key, value in responses.items():
            entry = self.pending.pop(key, None)
            if entry is None:
                continue
            server_id, _ = entry
            if isinstance(value, dict):
                self.session.send(jsonrpc.ok_response(server_id, value))
            else:
                self.session.respond_error(
                    server_id, -32602, "the client's answer is not an object"
                )
        if not self.pending and self.status == "input_required":
            self.status = "working"
            self.parked_until = None
        self._signal()

    def reject(self, key: str, error: Any) -> None:
        """The client answered one input request with an error: the server gets it."""
        entry = self.pending.pop(key, None)
        if entry is None or self.session is None:
            return
        server_id, _ = entry
        if not isinstance(error, dict):
            error = {"code": -32603, "message": "the client refused the request"}
        self.session.send({"jsonrpc": "2.0", "id": server_id, "error": error})
        if not self.pending and self.status == "input_required":
            self.status = "working"
        self._signal()

    def cancel(self, reason: str) -> None:
        """Stop it upstream (``notifications/cancelled``); its late answer is ignored."""
        if self.done:
            return
        session = self.session
        if session is not None and self.upstream_id is not None:
            for server_id, _ in self.pending.values():
                session.respond_error(server_id, -32800, "request cancelled")
            session.send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": self.upstream_id, "reason": reason},
                }
            )
        self.pending.clear()
        self.status = "cancelled"
        self.status_message = reason
        self._release()
        self._signal()

    def fail(self, error: dict[str, Any]) -> None:
        if self.done:
            return
        if self.session is not None and self.upstream_id is not None:
            self.session.send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/cancelled",
                    "params": {"requestId": self.upstream_id, "reason": error.get("message")},
                }
            )
        self.outcome = {"jsonrpc": "2.0", "id": None, "error": error}
        self.pending.clear()
        self.status = "failed"
        self._release()
        self._signal()

    def _release(self) -> None:
        session = self.session
        if session is not None and self.upstream_id is not None:
            session.forget(self.upstream_id)
