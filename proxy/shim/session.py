"""One host's MCP session carried over the proxy, across drops and proxy-side expiry.

The host's messages are POSTed one at a time, in the order the host wrote them (each
POST waits for its response headers, which the proxy sends once it has taken the
message), so a ``notifications/cancelled`` can never overtake its request. Answers stream
back concurrently: each request's SSE response is followed by its own task, the session's
standalone ``GET`` stream by another, and every message they carry is written to the
host once. The rules are documented in :mod:`proxy.shim`.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import structlog

from proxy.backoff import Backoff
from proxy.core import jsonrpc
from proxy.core.errors import error_message
from proxy.core.jsonrpc import Kind, Message
from proxy.core.protocol import SESSION_HEADER
from proxy.shim.http import (
    GATEWAY_LOST,
    Lost,
    NotSent,
    ProxyLink,
    SseReader,
    balancer_lost,
    error_of,
    is_sse,
    read_released,
    reason_of,
    retry_after_refusal,
)
from proxy.shim.stdio import HostPipe
from proxy.shim.streams import (
    SESSION_EXPIRED,
    SESSION_EXPIRED_CODE,
    UNAVAILABLE_CODE,
    Call,
    follow_request,
    follow_standalone,
    unknown_outcome,
)

log = structlog.get_logger("proxy.shim")


class ShimSession:
    """Forwards host messages to the proxy and everything that comes back to the host."""

    def __init__(
        self,
        pipe: HostPipe,
        link: ProxyLink,
        *,
        reconnect_max_seconds: float,
        connect_timeout_seconds: float = 5.0,
    ) -> None:
        self.pipe = pipe
        self.link = link
        self.budget = reconnect_max_seconds
        # The host's initialize: no session is up to keep, and the host waits on it.
        self.connect_budget = connect_timeout_seconds
        self.calls: dict[Any, Call] = {}  # by request id, host's or the shim's own
        self._followers: set[asyncio.Task[None]] = set()
        self._standalone: asyncio.Task[None] | None = None
        self._init_request: dict[str, Any] | None = None  # the host's, replayed after 404
        self._host_initialized = False  # the host sent notifications/initialized
        self._needs_reinit = False
        self._reinits = 0

    # ------------------------------------------------------------------ to the host
    def answer_error(
        self,
        call: Call,
        code: int,
        message: str,
        reason: str,
        data: dict[str, Any] | None = None,
    ) -> None:
        """Answer ``call`` with an error (``data`` beside its ``reason``), unless it is
        answered or the host cancelled it (no response is expected after
        ``notifications/cancelled``)."""
        if call.answered:
            return
        call.answer = error_message(call.id, code, message, {**(data or {}), "reason": reason})
        self._finish(call)
        log.warning(
            "request_failed",
            session=self.link.session_label,
            method=call.method,
            reason=reason,
            error=message,
        )
        if not call.internal and not call.cancelled:
            self.pipe.write(jsonrpc.encode(call.answer))

    def _finish(self, call: Call) -> None:
        if self.calls.get(call.id) is call:
            del self.calls[call.id]
        call.done.set()

    def from_proxy(self, data: str) -> None:
        """One SSE event's data: write each message to the host once; keep answers to
        the shim's own requests. Garbage is logged and skipped."""
        try:
            parsed = json.loads(data)
        except ValueError:
            log.warning("bad_event_from_proxy", session=self.link.session_label, size=len(data))
            return
        items = parsed if isinstance(parsed, list) else [parsed]
        for item in items:
            if not isinstance(item, dict):
                log.warning("bad_event_from_proxy", session=self.link.session_label)
                continue
            if "method" not in item and ("result" in item or "error" in item):
                rid = item.get("id")
                call = self.calls.get(rid) if isinstance(rid, str | int) else None
                if call is None:  # never a second answer, nor one the host did not ask for
                    log.warning("unmatched_response", session=self.link.session_label)
                    continue
                call.answer = item
                self._finish(call)
                if call.method == "initialize":
                    self._adopt_version(item)
                if call.internal:
                    continue
            single = len(items) == 1 and "\n" not in data and isinstance(parsed, dict)
            self.pipe.write(data.encode() if single else jsonrpc.encode(item))

    def _adopt_version(self, answer: dict[str, Any]) -> None:
        result = answer.get("result")
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        if isinstance(version, str):
            self.link.protocol_version = version  # MCP-Protocol-Version from now on

    # ------------------------------------------------------------------ from the host
    async def deliver(self, msg: Message) -> None:
        """Send one host message to the proxy; returns once the proxy has taken it."""
        if msg.kind is Kind.REQUEST:
            call = Call(msg.id, msg.method or "")
            if msg.method == "initialize":
                await self._start_session(call, msg)
            else:
                await self.send_request(call, msg)
            return
        if msg.method == "notifications/cancelled":
            target_id = msg.params.get("requestId")
            target = self.calls.get(target_id) if isinstance(target_id, str | int) else None
            if target is not None:
                target.cancelled = True
        if self._needs_reinit:  # it belongs to the expired session
            log.info("dropped_for_expired_session", method=msg.method or "response")
            return
        accepted = await self._send_other(msg)
        if msg.method == "notifications/initialized" and accepted:
            self._host_initialized = True
            self.ensure_standalone()

    async def _start_session(self, call: Call, msg: Message) -> None:
        if self.link.session_id is not None:  # the host starts over: end the old one
            await self.end_session()
        self._init_request = dict(msg.raw)
        self._host_initialized = False
        self._needs_reinit = False
        await self.send_request(call, msg, fresh=True)
        await call.done.wait()  # nothing else may go before the InitializeResult

    async def send_request(
        self, call: Call, msg: Message, *, fresh: bool = False, deadline: float | None = None
    ) -> None:
        """POST a request and hand its answer stream to a follower task.

        A request the proxy has not taken is the shim's alone: news that the session is
        gone (a 404 on another stream) does not answer it; it goes to the new session.
        A connect error or timeout proves the proxy never got it: retried with backoff
        until its deadline (the reconnect budget; the connect timeout for the host's own
        ``initialize``, which no session waits behind), then ``proxy_unreachable``. A
        404 refused it, so it never ran: the session is replaced (the host's
        ``initialize`` replayed) and it is sent there, once. Any other failure before its
        stream's first event id leaves the outcome unknown: ``outcome_unknown``, never
        re-sent. Starting the new session counts within the request's own deadline.
        """
        if deadline is None:
            budget = self.connect_budget if fresh and not call.internal else self.budget
            deadline = time.monotonic() + budget
        budget = round(deadline - time.monotonic(), 1)
        backoff = Backoff()
        refused_404 = 0
        while True:
            if not fresh and self._needs_reinit:
                failure = await self._reinitialize(deadline)
                if failure is None and self._needs_reinit:  # it ended as it started
                    if time.monotonic() < deadline:
                        continue  # start one more, within the request's deadline
                    failure = "it ended as it started"
                if failure is not None:
                    message = f"{SESSION_EXPIRED}; a new one could not be started: {failure}"
                    self.answer_error(call, SESSION_EXPIRED_CODE, message, "session_expired")
                    return
            call.session_id = None if fresh else self.link.session_id
            try:
                response = await self.link.post(
                    msg.encoded(), fresh=fresh, connect=deadline - time.monotonic()
                )
            except NotSent as exc:
                log.info("proxy_unreachable", session=self.link.session_label, error=str(exc))
                if not await self._pause(deadline, backoff.next_delay()):
                    message = f"the proxy is unreachable: {exc} (tried for {budget:g} s)"
                    self.answer_error(call, UNAVAILABLE_CODE, message, "proxy_unreachable")
                    return
                continue
            except Lost as exc:
                self.answer_error(call, UNAVAILABLE_CODE, unknown_outcome(exc), "outcome_unknown")
                return
            wait = await self._refused_before_it_ran(response)
            if wait is not None:
                if not await self._pause(deadline, max(wait, backoff.next_delay())):
                    message = f"the proxy refused the request (before it ran) for {budget:g} s"
                    self.answer_error(call, UNAVAILABLE_CODE, message, "proxy_unreachable")
                    return
                continue
            if response.status == 404 and call.session_id is not None:
                response.release()  # refused, so certainly not run
                self.session_gone(call.session_id, "404 on POST")
                refused_404 += 1
                if refused_404 > 1:  # the new session refused it too
                    code, reason = SESSION_EXPIRED_CODE, "session_expired"
                    self.answer_error(call, code, SESSION_EXPIRED, reason)
                    return
                continue  # to a new session (the loop's top starts it)
            break
        self.calls[call.id] = call  # taken by the proxy: its answer comes on its stream
        await self._take_response(call, response, fresh)

    @staticmethod
    async def _pause(deadline: float, delay: float) -> bool:
        """Sleep ``delay`` before a new try, but not past ``deadline`` (the last try is
        made at the deadline itself); False once the deadline has passed."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        await asyncio.sleep(min(delay, left))
        return True

    async def _refused_before_it_ran(self, response: aiohttp.ClientResponse) -> float | None:
        """When ``response`` refuses the request before it ran (a draining replica, a
        store that did not answer, a balancer with no replica up): it is released and
        the seconds to wait before sending it again are returned; otherwise None (the
        response is the request's, untouched)."""
        if response.status != 503 or is_sse(response):
            return None
        body = await read_released(response)  # _take_response reads it again from memory
        wait = retry_after_refusal(503, body, response.headers.get("Retry-After"))
        if wait is not None:
            log.info("request_refused_retry", session=self.link.session_label, wait=wait)
        return wait

    async def _take_response(
        self, call: Call, response: aiohttp.ClientResponse, fresh: bool
    ) -> None:
        if fresh and response.status == 200:
            self.link.session_id = response.headers.get(SESSION_HEADER)
            call.session_id = self.link.session_id
            log.info("session_started", session=self.link.session_label)
        if response.status == 200 and is_sse(response):
            self._follow(call, SseReader(response))
            self.ensure_standalone()
            return
        try:
            body = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            self.answer_error(call, UNAVAILABLE_CODE, unknown_outcome(exc), "outcome_unknown")
            return
        finally:
            response.release()
        if response.status == 200:  # a JSON answer (§Sending Messages, item 5)
            self.from_proxy(body.decode(errors="replace"))
            if not call.answered:
                self.answer_error(
                    call,
                    UNAVAILABLE_CODE,
                    "the proxy's JSON answer had no response",
                    "bad_answer",
                )
            return
        error = error_of(response.status, body)
        data = error.get("data")
        data = data if isinstance(data, dict) else None
        if balancer_lost(response.status, error):
            # Not the proxy's answer but a balancer's: the replica it chose broke off or
            # did not answer after the request left for it, so the request may have run.
            message = unknown_outcome(f"the balancer answered HTTP {response.status}")
            self.answer_error(call, UNAVAILABLE_CODE, message, "outcome_unknown", data)
            return
        message = str(error.get("message", ""))
        self.answer_error(call, int(error["code"]), message, reason_of(error), data)

    async def _send_other(self, msg: Message) -> bool:
        """POST a notification or response; True once the proxy accepted it (202).

        Retried while no connection can be made, or while a refusal says it did not run
        (a 503: :func:`proxy.shim.http.retry_after_refusal`). After a failure that may
        have reached the proxy (the connection broke, or a balancer's own 502/504), a
        response is sent again (the proxy drops an answer that matches no open request)
        and a notification is not (logged as possibly lost).
        """
        backoff = Backoff()
        started = time.monotonic()
        what = msg.method or "response"
        while True:
            if self._needs_reinit:  # the session expired while the proxy was unreachable
                log.info("dropped_for_expired_session", method=what)
                return False
            session_id = self.link.session_id
            try:
                response = await self.link.post(msg.encoded())
                await self._not_taken(response)
            except (NotSent, Lost) as exc:
                retry = isinstance(exc, NotSent) or msg.kind is Kind.RESPONSE
                if not retry or time.monotonic() - started > self.budget:
                    log.warning("message_maybe_lost", message=what, error=str(exc))
                    return False
                log.info("proxy_unreachable", session=self.link.session_label, error=str(exc))
                await asyncio.sleep(backoff.next_delay())
                continue
            response.release()
            if response.status == 404:
                self.session_gone(session_id, "404 on POST")
            elif response.status >= 300:
                log.warning("message_refused", message=what, status=response.status)
            return response.status < 300

    @staticmethod
    async def _not_taken(response: aiohttp.ClientResponse) -> None:
        """Raise :class:`NotSent` when ``response`` refuses a message before it ran (a
        draining replica, a store that did not answer, a balancer with no replica up),
        :class:`Lost` when it is a balancer's own 502/504 (the replica it chose broke
        off or did not answer: the message may have reached it); otherwise return."""
        status = response.status
        if status not in (503, *GATEWAY_LOST) or is_sse(response):
            return
        body = await read_released(response)
        if retry_after_refusal(status, body, response.headers.get("Retry-After")) is not None:
            raise NotSent(f"refused before it ran (HTTP {status})")
        if balancer_lost(status, error_of(status, body)):
            raise Lost(f"the balancer answered HTTP {status}")

    # ------------------------------------------------------------------ streams
    def _follow(self, call: Call, reader: SseReader) -> None:
        task = asyncio.create_task(follow_request(self, call, reader), name=f"call-{call.id}")
        self._followers.add(task)
        task.add_done_callback(self._followers.discard)

    def ensure_standalone(self) -> None:
        """Keep the session's GET stream open (§Listening for Messages from the Server)."""
        if not self._host_initialized or self._needs_reinit or self.link.session_id is None:
            return
        if self._standalone is None or self._standalone.done():
            self._standalone = asyncio.create_task(
                follow_standalone(self, self.link.session_id), name="standalone"
            )

    # ------------------------------------------------------------------ expiry
    def session_gone(self, session_id: str | None, why: str) -> None:
        """The proxy answered 404 for this session (§Session Management, item 3): every
        request in flight gets ``session expired at the proxy``; the next host request
        starts a new session first (item 4)."""
        if session_id is None or session_id != self.link.session_id:
            return  # already handled, or an older session's news
        log.warning(
            "session_expired", session=self.link.session_label, why=why, in_flight=len(self.calls)
        )
        for call in list(self.calls.values()):
            self.answer_error(call, SESSION_EXPIRED_CODE, SESSION_EXPIRED, "session_expired")
        self.link.session_id = None
        self._needs_reinit = True
        current = asyncio.current_task()
        for task in [*self._followers, self._standalone]:
            if task is not None and task is not current:
                task.cancel()

    async def _reinitialize(self, deadline: float) -> str | None:
        """Replay the host's ``initialize`` (answer kept here) and ``initialized``, by
        ``deadline``; None once done, else why not."""
        if self._init_request is None:
            return "the host has not initialized"
        self._reinits += 1
        raw = {**self._init_request, "id": f"mcp-resume-proxy-reinit-{self._reinits}"}
        call = Call(raw["id"], "initialize", internal=True)
        await self.send_request(call, jsonrpc.classify(raw), fresh=True, deadline=deadline)
        await call.done.wait()
        if call.answer is None or "result" not in call.answer or self.link.session_id is None:
            error = (call.answer or {}).get("error")
            log.error("reinitialize_failed", answer=error)
            message = error.get("message") if isinstance(error, dict) else None
            return str(message or "no InitializeResult")
        self._needs_reinit = False
        if self._host_initialized:
            note = jsonrpc.classify({"jsonrpc": "2.0", "method": "notifications/initialized"})
            await self._send_other(note)
        if self._needs_reinit:  # a 404 meanwhile: the new session is gone already
            return None  # (the caller looks again)
        log.info("session_reinitialized", session=self.link.session_label)
        self.ensure_standalone()
        return None

    async def end_session(self) -> None:
        """Stop every stream task and DELETE the session (§Session Management, item 5)."""
        tasks = [t for t in [*self._followers, self._standalone] if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.link.session_id is not None:
            status = await self.link.delete()
            log.info("session_deleted", session=self.link.session_label, status=status)
            self.link.session_id = None
