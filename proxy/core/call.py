"""One modern request running on a pooled upstream session: its status and its rules.

A 2026-07-28 request has no session of its own, so the proxy runs it on a pooled legacy
upstream session (:mod:`proxy.core.calltable` routes the server's messages to it). A
:class:`Call` outlives the HTTP request that started it in two ways: when the server asks
the client something (it waits, ``input_required``, for the client's retry with
``inputResponses``: MRTR, ``basic/patterns/mrtr.mdx``), and when it became a task (it runs
until it completes, fails, is cancelled or its task expires: the Tasks extension).

Status, as the Tasks extension names it, and every legal move (h11 style: one table)::

    WORKING ──ask──▶ INPUT_REQUIRED ──answered──▶ WORKING
       │                  │ (ask)
       └──────────────────┴──respond / fail / cancel──▶ COMPLETED | FAILED | CANCELLED

Each method takes what happened and returns the messages the server must be sent (answers
to its questions, ``notifications/cancelled``): the adapter sends them. Pure: no clock, no
ids of its own, no I/O.
"""

from __future__ import annotations

import itertools
from collections import deque
from enum import Enum, StrEnum
from typing import Any

from proxy.core import jsonrpc
from proxy.core.era import ModernRequest, log_wanted
from proxy.core.errors import (
    LostReason,
    ProxyError,
    answer_with_error,
    error_object,
    lost_error,
)
from proxy.core.jsonrpc import Message
from proxy.core.modern_errors import UPSTREAM_CODE, URL_ELICITATION_REQUIRED
from proxy.core.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    REQUEST_CANCELLED,
    SERVER_ERROR,
)

# Server→client requests a call may carry, and (capability, key label) each needs.
INPUT_METHODS = {
    "elicitation/create": ("elicitation", "elicitation"),
    "sampling/createMessage": ("sampling", "sampling"),
    "roots/list": ("roots", "roots"),
}
# Requests during which the server may ask the client (MRTR: basic/patterns/mrtr.mdx).
ASKING = frozenset({"tools/call", "prompts/get", "resources/read"})
_ANSWERABLE = ("elicitation", "sampling", "roots")
MAX_NOTES = 10_000  # notifications held for a client that is not reading (then dropped)
# A legacy server may name an input request's key (MRTR keys are the server's to choose;
# a legacy wire has no place for one): params._meta[KEY_HINT] on its request.
KEY_HINT = "io.github.mcp-resume-proxy/inputKey"


class CallStatus(StrEnum):
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class CallEvent(Enum):
    ASK = "ask"  # the server asked the client something
    ANSWERED = "answered"  # the last pending question is answered
    RESPOND = "respond"  # the server answered the request
    FAIL = "fail"  # the request failed (an error answer, or the proxy gave up on it)
    CANCEL = "cancel"  # the client (or an expiry) cancelled it


_ENDS = {
    CallEvent.RESPOND: CallStatus.COMPLETED,
    CallEvent.FAIL: CallStatus.FAILED,
    CallEvent.CANCEL: CallStatus.CANCELLED,
}
TRANSITIONS: dict[CallStatus, dict[CallEvent, CallStatus]] = {
    CallStatus.WORKING: {CallEvent.ASK: CallStatus.INPUT_REQUIRED, **_ENDS},
    CallStatus.INPUT_REQUIRED: {
        CallEvent.ASK: CallStatus.INPUT_REQUIRED,
        CallEvent.ANSWERED: CallStatus.WORKING,
        **_ENDS,
    },
    CallStatus.COMPLETED: {},
    CallStatus.FAILED: {},
    CallStatus.CANCELLED: {},
}
TERMINAL = frozenset(state for state, moves in TRANSITIONS.items() if not moves)
"""The statuses a call (and its task record) never leaves."""


class IllegalCallTransition(ProxyError):
    """A bug: a call was asked for a move its status does not allow."""


def advance(status: CallStatus, event: CallEvent) -> CallStatus:
    try:
        return TRANSITIONS[status][event]
    except KeyError:
        raise IllegalCallTransition(f"a call cannot {event.value} when {status.value}") from None


URL_DECLINED = "url_elicitation_declined"
URL_CANCELLED = "url_elicitation_cancelled"


def url_refused(action: str, request: dict[str, Any]) -> dict[str, Any]:
    """The answer to a call whose client declined (or dismissed) a URL elicitation the
    server required: -32000 ``data.reason`` ``url_elicitation_declined`` or
    ``url_elicitation_cancelled``, ``data.upstreamCode`` -32042, the elicitation's URL."""
    params = request.get("params") or {}
    reason = URL_DECLINED if action == "decline" else URL_CANCELLED
    verb = "declined" if action == "decline" else "dismissed"
    message = f"the user {verb} the URL elicitation the server requires ({params.get('url')})"
    data = {"reason": reason, UPSTREAM_CODE: URL_ELICITATION_REQUIRED, "url": params.get("url")}
    return error_object(SERVER_ERROR, message, data)


def _cancelled(upstream_id: int, reason: Any) -> dict[str, Any]:
    params = {"requestId": upstream_id, "reason": reason}
    return {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}


class Call:
    """One upstream request of a modern client, and what became of it."""

    def __init__(
        self, method: str, params: dict[str, Any], client: ModernRequest, principal: str | None
    ) -> None:
        self.handle: str | None = None  # unguessable, given when parked (its requestState)
        self.method = method
        self.params = params
        self.client = client  # the latest request's metadata (the retry's, after MRTR)
        self.principal = principal
        self.upstream_id: int | None = None  # set while it runs on a pooled session
        # A call that may make the server ask a client able to answer gets an upstream
        # session of its own (proxy/modern/pool.py): then the question is surely its.
        self.exclusive = method in ASKING and any(client.declares(c) for c in _ANSWERABLE)
        self.task_support: str | None = None  # the tool's execution.taskSupport, if known
        self.status = CallStatus.WORKING
        self.outcome: dict[str, Any] | None = None  # the upstream's response, raw
        self.pending: dict[str, tuple[Any, dict[str, Any]]] = {}  # key -> (server id, request)
        self._keys = itertools.count(1)
        self._used_keys: set[str] = set()  # unique over the call's (and task's) life
        self.refused: dict[str, Any] = {}  # capabilities asked for, not declared
        self.notes: deque[dict[str, Any]] = deque()
        self.task_id: str | None = None
        self.parked_until: float | None = None  # input_required, waiting for a retry
        self.status_message: str | None = None
        # A call that waits on URL elicitations before it is sent (anew) upstream: the
        # server answered -32042 (proxy/core/url_elicit.py); its questions have no server id.
        self.resend = False
        self.url_rounds = 0  # how many times the server answered -32042 for this request

    def __repr__(self) -> str:
        return f"<Call {self.method} {self.status.value} upstream_id={self.upstream_id}>"

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    @property
    def attached(self) -> bool:
        return self.upstream_id is not None

    @property
    def unsent(self) -> bool:
        """Its URL elicitations are all accepted: send the request to the server (again)."""
        return self.resend and self.status is CallStatus.WORKING and not self.attached

    def _move(self, event: CallEvent) -> None:
        self.status = advance(self.status, event)

    def take_notes(self) -> list[dict[str, Any]]:
        notes = list(self.notes)
        self.notes.clear()
        return notes

    def input_requests(self) -> dict[str, dict[str, Any]]:
        return {key: request for key, (_, request) in self.pending.items()}

    # ------------------------------------------------------------------ from the upstream
    def respond(self, msg: Message) -> bool:
        """The server's answer; False if the call had already ended (ignored)."""
        if self.done:
            return False
        self.outcome = msg.raw
        self.pending.clear()
        self._move(CallEvent.FAIL if msg.is_error else CallEvent.RESPOND)
        return True

    def notify(self, msg: Message) -> bool:
        """A progress or log notification for the client; False if it is not passed on."""
        if self.task_id is not None or self.status in TERMINAL:
            return False  # tasks carry no progress or log messages (Tasks extension)
        raw = msg.raw
        method = raw.get("method")
        if method == "notifications/progress":
            token = self.client.progress_token
            if token is None:
                return False
            params = dict(msg.params)
            params["progressToken"] = token  # the client's own, back
            raw = {"jsonrpc": "2.0", "method": method, "params": params}
        elif method == "notifications/message" and not log_wanted(
            self.client.log_level, msg.params.get("level")
        ):
            return False
        if len(self.notes) < MAX_NOTES:
            self.notes.append(raw)
        return True

    def ask(self, msg: Message) -> tuple[bool, list[dict[str, Any]]]:
        """The server asks the client something (``msg.method`` in INPUT_METHODS): it
        becomes an input request. Returns (changed, messages for the server)."""
        method = msg.method or ""
        if self.done:
            refusal = jsonrpc.error_response(
                msg.id, SERVER_ERROR, "the request was already answered"
            )
            return False, [refusal]
        capability, label = INPUT_METHODS[method]
        if not self.client.declares(capability):
            # The client cannot answer it (MRTR: never send what it did not declare). The
            # server hears so, as a legacy client would say it; if the call then fails,
            # the client learns what it lacked (-32021), else it gets what the tool made.
            self.refused[capability] = {}
            message = f"the client does not support {method}"
            return False, [jsonrpc.error_response(msg.id, METHOD_NOT_FOUND, message)]
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
        self.pending[self._new_key(label, hint)] = (msg.id, request)
        self._move(CallEvent.ASK)
        return True, []

    def _new_key(self, label: str, hint: Any) -> str:
        if isinstance(hint, str) and hint and hint not in self._used_keys:
            key = hint
        else:
            key = f"{label}-{next(self._keys)}"
            while key in self._used_keys:
                key = f"{label}-{next(self._keys)}"
        self._used_keys.add(key)
        return key

    def await_url(self, requests: list[dict[str, Any]], hints: list[Any]) -> None:
        """Not sent yet: it waits for the client to accept URL-mode ``elicitation/create``
        ``requests`` (keys from ``hints``, the server's elicitationIds), then is sent."""
        self.resend = True
        for request, hint in zip(requests, hints, strict=True):
            self.pending[self._new_key("elicitation", hint)] = (None, request)
        self._move(CallEvent.ASK)

    def _url_answers(self, responses: dict[str, Any]) -> bool:
        """The client's answers to URL elicitations: each accepted one is done; a declined
        or cancelled one ends the call (the server never hears of it: it asked by an error,
        not a request). Anything else leaves the question pending (asked again)."""
        for key, value in responses.items():
            if key not in self.pending or not isinstance(value, dict):
                continue
            action = value.get("action")
            if action == "accept":
                del self.pending[key]
            elif action in ("decline", "cancel"):
                _, request = self.pending[key]
                self._end_failed(url_refused(action, request))
                return True
        self._after_answers()
        return True

    def lose(self, why: str) -> bool:
        """The upstream session ended under the call: it fails (nothing to tell the server)."""
        if self.done:
            return False
        self._end_failed(lost_error(LostReason.UPSTREAM_CLOSED, why))
        return True

    # ------------------------------------------------------------------ from the client
    def answer(self, responses: Any) -> tuple[bool, list[dict[str, Any]]]:
        """Deliver ``inputResponses``: keys not pending (never issued, answered) are ignored."""
        if not isinstance(responses, dict) or self.done:
            return False, []
        if self.resend and not self.attached:
            return self._url_answers(responses), []
        if not self.attached:
            return False, []
        out: list[dict[str, Any]] = []
        for key, value in responses.items():
            entry = self.pending.pop(key, None)
            if entry is None:
                continue
            server_id, _ = entry
            if isinstance(value, dict):
                out.append(jsonrpc.ok_response(server_id, value))
            else:
                message = "the client's answer is not an object"
                out.append(jsonrpc.error_response(server_id, INVALID_PARAMS, message))
        self._after_answers()
        return True, out

    def reject(self, key: str, error: Any) -> tuple[bool, list[dict[str, Any]]]:
        """The client answered one input request with an error: the server gets it."""
        if not self.attached or key not in self.pending:
            return False, []
        server_id, _ = self.pending.pop(key)
        if not isinstance(error, dict):
            error = error_object(INTERNAL_ERROR, "the client refused the request")
        self._after_answers()
        return True, [answer_with_error(server_id, error)]

    def _after_answers(self) -> None:
        if not self.pending and self.status is CallStatus.INPUT_REQUIRED:
            self._move(CallEvent.ANSWERED)
            self.parked_until = None

    def cancel(self, reason: str) -> tuple[bool, list[dict[str, Any]]]:
        """Stop it upstream (``notifications/cancelled``); its late answer is ignored."""
        if self.done:
            return False, []
        out: list[dict[str, Any]] = []
        if self.upstream_id is not None:
            for server_id, _ in self.pending.values():
                out.append(
                    jsonrpc.error_response(server_id, REQUEST_CANCELLED, "request cancelled")
                )
            out.append(_cancelled(self.upstream_id, reason))
        self.pending.clear()
        self._move(CallEvent.CANCEL)
        self.status_message = reason
        return True, out

    def fail(self, error: dict[str, Any]) -> tuple[bool, list[dict[str, Any]]]:
        """The proxy gives up on it with ``error`` (the server is told to stop)."""
        if self.done:
            return False, []
        out = (
            [] if self.upstream_id is None else [_cancelled(self.upstream_id, error.get("message"))]
        )
        self._end_failed(error)
        return True, out

    def _end_failed(self, error: dict[str, Any]) -> None:
        self.outcome = answer_with_error(None, error)
        self.pending.clear()
        self._move(CallEvent.FAIL)
