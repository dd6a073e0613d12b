"""The nemesis's HTTP clients, each recording what it was told (tests/nemesis/history.py):

- :class:`LegacyClient`: a 2025-11-25 session over Streamable HTTP through a cutter
  (tests/cut_proxy.py) in front of the balancer. Its calls stream progress (``slow``),
  ask a question (``ask``, answered with a POST) or are 2025-11-25 tasks (``params.task``,
  ``tasks/get``, ``tasks/result``); a broken stream is resumed with ``GET``
  + ``Last-Event-ID`` (on whichever replica the balancer picks) until the call ends or
  the bound passes. A stream silent for :data:`SILENT_S` is taken for broken (a paused
  replica holds a connection open and says nothing; the proxy's keepalives come every
  second).
- :class:`ModernClient`: a 2026-07-28 client straight to the balancer: ``task`` calls
  that become tasks and are polled with ``tasks/get``, and ``ask`` calls answered with an
  MRTR retry.

Each call is bounded by the run's ``bound``: past it the client stops and leaves the call
open (the checker's ``ended``/``bounded`` rules say so).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from proxy.core.sse import SSEDecoder
from tests.modern.client import Answer, Modern, body, read_answer, request_headers
from tests.nemesis.history import Call
from tests.support import MCP_HEADERS, initialize_request

SILENT_S = 5.0
RETRY_S = 0.2
BALANCER_GAVE_UP = (502, 503, 504)  # haproxy's own answers: the request's fate is unknown


# Refusals of a poll that say "ask again later" (503 + Retry-After): a client polls again.
POLL_AGAIN = frozenset({"store_unavailable", "proxy_draining"})


def poll_again(status: int, body: Any) -> bool:
    """Whether a ``tasks/get`` answer is a refusal to poll again after, not the task's."""
    return status == 503 and reason_of(body, status) in POLL_AGAIN


def reason_of(body: Any, status: int | None = None) -> str:
    """An error's ``data.reason``, else ``code<N>``; ``http<N>`` without a JSON-RPC body."""
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        data = error.get("data")
        if isinstance(data, dict) and isinstance(data.get("reason"), str):
            return str(data["reason"])
        return f"code{error.get('code')}"
    return f"http{status}"


async def json_body(resp: aiohttp.ClientResponse) -> Any:
    try:
        return json.loads(await resp.text())
    except ValueError:
        return None


async def within(bound: float, work: Awaitable[None], calls: list[Call]) -> bool:
    """Run one call's work for at most ``bound`` seconds; False if it had to be given up
    (the call stays open: the checker's ``ended`` rule reports the hang)."""
    try:
        await asyncio.wait_for(work, bound)
    except TimeoutError:
        if calls:
            calls[-1].notes.append("the client gave up at the bound")
        return False
    return True


class Broken(Exception):
    """The connection broke or fell silent: resume."""


class LegacyClient:
    def __init__(
        self,
        name: str,
        http: aiohttp.ClientSession,
        url: str,
        rng: random.Random,
        clock: Callable[[], float],
        bound: float,
    ) -> None:
        self.name, self.http, self.url, self.rng = name, http, url, rng
        self.clock, self.bound = clock, bound
        self.session_id = ""
        self.calls: list[Call] = []
        self._rid = 0

    def headers(self, **extra: str) -> dict[str, str]:
        h = dict(MCP_HEADERS)
        if self.session_id:
            h["Mcp-Session-Id"] = self.session_id
            h["MCP-Protocol-Version"] = "2025-11-25"
        return h | extra

    async def initialize(self, deadline: float) -> bool:
        self.session_id = ""
        body = initialize_request(0, client=self.name)
        body["params"]["capabilities"] = {"elicitation": {}, "tasks": {}}
        while self.clock() < deadline:
            try:
                async with self.http.post(self.url, json=body, headers=self.headers()) as resp:
                    if resp.status == 200:
                        await resp.read()
                        sid = resp.headers["Mcp-Session-Id"]
                        self.session_id = sid
                        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                        async with self.http.post(self.url, json=note, headers=self.headers()):
                            pass
                        return True
            except (aiohttp.ClientError, TimeoutError, KeyError):
                pass
            self.session_id = ""
            await asyncio.sleep(RETRY_S)
        return False

    async def run(self, until: float) -> None:
        while self.clock() < until:
            if not self.session_id and not await self.initialize(until):
                return
            if not await within(self.bound + 2, self.one_call(), self.calls):
                self.session_id = ""  # start afresh
            elif self.calls and self.calls[-1].answers[:1] == [("error", "lost_before_id")]:
                # That call may still run at the proxy, and this client keeps no standalone
                # GET stream: with two calls in flight the server's questions go there
                # (DESIGN.md §5 rule 4), never to the next call's stream. Start afresh.
                self.session_id = ""

    async def one_call(self) -> None:
        self._rid += 1
        rid = self._rid
        draw = self.rng.random()
        if draw < 0.15:
            await self.task_call(rid)
            return
        if draw < 0.7:
            steps = self.rng.randrange(10, 40)
            tool, args, expect = "slow", {"steps": steps, "delay": 0.05}, f"done {steps}"
        else:
            tool, args, expect = "ask", {"question": f"{self.name}?"}, f"answer {rid}"
        call = Call(self.name, "legacy", f"{self.name}#{rid}", tool, expect, self.clock())
        self.calls.append(call)
        params = {"name": tool, "arguments": args, "_meta": {"progressToken": f"p{rid}"}}
        body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
        deadline = call.started + self.bound
        last_id: str | None = None
        try:
            while await self.unserved(body, deadline):  # haproxy 503: no replica in rotation
                await asyncio.sleep(RETRY_S)
            call.notes.append("POST")
            async with self.http.post(self.url, json=body, headers=self.headers()) as resp:
                call.notes.append(f"POST: {resp.status}")
                if resp.status != 200:
                    got = await json_body(resp)
                    reason = reason_of(got, resp.status)
                    if resp.status in BALANCER_GAVE_UP and got is None:
                        call.notes.append(f"POST: the balancer answered {resp.status}")
                        reason = "lost_before_id"
                    call.answer("error", reason, self.clock())
                    if resp.status == 404:
                        self.session_id = ""
                    return
                last_id = await self.follow(resp, call, rid, None)
        except (aiohttp.ClientError, Broken, TimeoutError) as exc:
            call.notes.append(f"POST broke: {exc!r}")
            last_id = call.stream["last"] if call.stream else None
        while not call.answers and self.clock() < deadline:
            if last_id is None:
                call.answer("error", "lost_before_id", self.clock())
                return
            call.notes.append(f"resume after {last_id}")
            try:
                h = self.headers(**{"Last-Event-ID": last_id})
                async with self.http.get(self.url, headers=h) as resp:
                    if resp.status in BALANCER_GAVE_UP or resp.status >= 500:
                        got = await json_body(resp)
                        if got is not None:
                            call.answer("error", reason_of(got, resp.status), self.clock())
                            return
                        await asyncio.sleep(RETRY_S)
                        continue
                    if resp.status != 200:
                        got = await json_body(resp)
                        call.answer("error", reason_of(got, resp.status), self.clock())
                        if resp.status == 404:
                            self.session_id = ""
                        return
                    last_id = await self.follow(resp, call, rid, last_id)
            except (aiohttp.ClientError, Broken, TimeoutError):
                last_id = call.stream["last"] if call.stream else last_id
                await asyncio.sleep(RETRY_S)

    async def task_call(self, rid: int) -> None:
        """A 2025-11-25 task (``params.task``): ``tasks/get`` until it ends, then
        ``tasks/result`` for its answer; each request on whichever replica."""
        steps = self.rng.randrange(10, 30)
        label = f"{self.name}#{rid}"
        call = Call(self.name, "legacy", label, "task", f"done {steps}", self.clock())
        self.calls.append(call)
        deadline = call.started + self.bound
        args = {"steps": steps, "delay": 0.05}
        params = {"name": "slow", "arguments": args, "task": {}}
        created = await self.ask(rid, "tools/call", params, deadline)
        if created is None:
            return  # left open: the checker reports it
        if "error" in created.body:
            call.answer("error", reason_of(created.body, created.status), self.clock())
            return
        if "task" not in created.result:  # answered as a plain call: not what was asked
            call.answer("error", "a plain answer to a task request", self.clock())
            return
        task_id = created.result["task"]["taskId"]
        call.stream = {"task": task_id}
        while self.clock() < deadline:
            await asyncio.sleep(0.2)
            got = await self.ask(rid, "tasks/get", {"taskId": task_id}, deadline)
            if got is None or poll_again(got.status, got.body):
                continue
            if "error" in got.body:
                call.answer("error", reason_of(got.body, got.status), self.clock())
                return
            if got.result.get("status") in ("completed", "failed", "cancelled"):
                break
        done = await self.ask(rid, "tasks/result", {"taskId": task_id}, deadline)
        if done is None:
            return
        if "result" in done.body:
            text = (done.body["result"].get("content") or [{}])[0].get("text")
            call.answer("result", str(text), self.clock())
        else:
            call.answer("error", reason_of(done.body, done.status), self.clock())

    async def ask(
        self, rid: int, method: str, params: dict[str, Any], deadline: float
    ) -> Answer | None:
        """One request of a task's (JSON or SSE answer); None if it broke before an
        answer or the balancer had no replica (retried while the deadline allows)."""
        message = {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}
        while self.clock() < deadline:
            try:
                async with self.http.post(self.url, json=message, headers=self.headers()) as r:
                    if r.status in BALANCER_GAVE_UP and "json" not in r.headers.get(
                        "Content-Type", ""
                    ):
                        await r.read()
                        await asyncio.sleep(RETRY_S)
                        continue
                    return await asyncio.wait_for(read_answer(r), SILENT_S * 4)
            except (aiohttp.ClientError, TimeoutError, ValueError, AssertionError):
                await asyncio.sleep(RETRY_S)
        return None

    async def unserved(self, body: dict[str, Any], deadline: float) -> bool:
        """Whether the balancer has no replica in rotation now (503 of its own to a
        ``ping``: nothing reached a server, so the call may be sent later), until the
        deadline."""
        ping = {"jsonrpc": "2.0", "id": f"ping-{body['id']}", "method": "ping"}
        try:
            async with self.http.post(self.url, json=ping, headers=self.headers()) as resp:
                await resp.read()
                return resp.status == 503 and self.clock() < deadline
        except (aiohttp.ClientError, TimeoutError):
            return self.clock() < deadline

    async def follow(
        self, resp: aiohttp.ClientResponse, call: Call, rid: int, last_id: str | None
    ) -> str | None:
        """Read one response stream of the call until its answer, a break or its end."""
        decoder = SSEDecoder()
        while True:
            try:
                chunk = await asyncio.wait_for(resp.content.readany(), SILENT_S)
            except TimeoutError as exc:
                raise Broken("silent") from exc
            if not chunk:
                return last_id
            for event in decoder.feed(chunk):
                if event.id:
                    last_id = event.id
                    if call.stream is None:  # the audit replays from before seq 1
                        epoch, stream = event.id.split(".")[:2]
                        start = f"{epoch}.{stream}.0"
                        call.stream = {"session": self.session_id, "event": start}
                    call.stream["last"] = event.id
                if not event.data:
                    continue
                await self.deliver(json.loads(event.data), call, rid)
                if call.answers:
                    return last_id

    async def deliver(self, msg: dict[str, Any], call: Call, rid: int) -> None:
        if msg.get("method") == "notifications/progress":
            call.progress.append(int(msg["params"]["progress"]))
        elif msg.get("method") == "elicitation/create" and "id" in msg:
            answer = {"action": "accept", "content": {"answer": f"answer {rid}"}}
            reply = {"jsonrpc": "2.0", "id": msg["id"], "result": answer}
            # A POST that broke may or may not have arrived: sent again (the proxy drops a
            # second copy of an answer it already has), a few times.
            for _ in range(3):
                call.notes.append("answer POST")
                try:
                    async with self.http.post(self.url, json=reply, headers=self.headers()) as r:
                        call.notes.append(f"answer POST: {r.status}")
                        break
                except aiohttp.ClientError:
                    call.notes.append("answer not delivered")
                    await asyncio.sleep(RETRY_S)
        elif msg.get("id") == rid and "method" not in msg:
            if "result" in msg:
                content = msg["result"].get("content") or [{}]
                call.answer("result", str(content[0].get("text")), self.clock())
            else:
                call.answer("error", reason_of(msg), self.clock())


class ModernClient:
    def __init__(
        self,
        name: str,
        http: aiohttp.ClientSession,
        url: str,
        rng: random.Random,
        clock: Callable[[], float],
        bound: float,
    ) -> None:
        self.name, self.rng, self.clock, self.bound = name, rng, clock, bound
        self.client = Modern(http, url)
        self.calls: list[Call] = []
        self._n = 0

    async def run(self, until: float) -> None:
        while self.clock() < until:
            self._n += 1
            work = self.task_call() if self.rng.random() < 0.6 else self.ask_call()
            await within(self.bound + 2, work, self.calls)

    async def send(self, method: str, params: dict[str, Any], deadline: float) -> Answer:
        """One request, sent again while the balancer answers 503 itself (no replica in
        rotation: it reached none); other answers without a JSON-RPC body raise."""
        while True:
            message = body(method, params, next(self.client._ids), self.client.caps)
            headers = request_headers(method, message["params"])
            async with self.client.http.post(self.client.url, json=message, headers=headers) as r:
                if r.status == 503 and "json" not in r.headers.get("Content-Type", ""):
                    await r.read()
                    if self.clock() < deadline:
                        await asyncio.sleep(RETRY_S)
                        continue
                return await read_answer(r)

    async def task_call(self) -> None:
        steps = self.rng.randrange(10, 30)
        label = f"{self.name}#{self._n}"
        call = Call(self.name, "modern", label, "task", f"done {steps}", self.clock())
        self.calls.append(call)
        deadline = call.started + self.bound
        try:
            args = {"steps": steps, "delay": 0.05}
            call.notes.append("tools/call")
            first = await self.send("tools/call", {"name": "slow", "arguments": args}, deadline)
        except (aiohttp.ClientError, ValueError, AssertionError) as exc:
            call.notes.append(f"tools/call broke: {exc!r}"[:120])
            call.answer("error", "lost_before_id", self.clock())
            return
        call.notes.append(f"tools/call: {first.status} {reason_of(first.body, first.status)}")
        if first.status != 200 or "result" not in first.body:
            call.answer("error", reason_of(first.body or None, first.status), self.clock())
            return
        result = first.body["result"]
        if result.get("resultType") != "task":
            call.answer("result", str((result.get("content") or [{}])[0].get("text")), self.clock())
            return
        task_id = result["taskId"]
        call.stream = {"task": task_id}
        while self.clock() < deadline:
            await asyncio.sleep(0.2)
            try:
                got = await self.send("tasks/get", {"taskId": task_id}, deadline)
            except (aiohttp.ClientError, ValueError, AssertionError) as exc:
                call.notes.append(f"tasks/get broke: {exc!r}"[:120])
                continue
            status = got.body.get("result", {}).get("status") if "result" in got.body else None
            call.notes.append(f"tasks/get: {got.status} {status or reason_of(got.body)}")
            if (got.status in BALANCER_GAVE_UP and not got.body) or poll_again(
                got.status, got.body
            ):
                continue
            if "error" in got.body:
                call.answer("error", reason_of(got.body, got.status), self.clock())
                return
            if task_ended(got.body.get("result", {}), call, self.clock()):
                return

    async def ask_call(self) -> None:
        label = f"{self.name}#{self._n}"
        call = Call(self.name, "modern", label, "ask", f"a{self._n}", self.clock())
        self.calls.append(call)
        args = {"question": f"q{self._n}"}
        deadline = call.started + self.bound
        try:
            first = await self.send("tools/call", {"name": "ask", "arguments": args}, deadline)
            if first.status != 200 or first.body.get("result", {}).get("resultType") != (
                "input_required"
            ):
                call.answer("error", reason_of(first.body or None, first.status), self.clock())
                return
            (key,) = first.result["inputRequests"]
            answer = {key: {"action": "accept", "content": {"answer": f"a{self._n}"}}}
            params = {"name": "ask", "arguments": args, "inputResponses": answer}
            params["requestState"] = first.result["requestState"]
            done = await self.send("tools/call", params, deadline)
        except (aiohttp.ClientError, ValueError, AssertionError):
            call.answer("error", "lost_before_id", self.clock())
            return
        if "result" in done.body:
            text = str((done.body["result"].get("content") or [{}])[0].get("text"))
            call.answer("result", text, self.clock())
        else:
            call.answer("error", reason_of(done.body or None, done.status), self.clock())


def task_ended(task: dict[str, Any], call: Call, now: float) -> bool:
    """Record a ``DetailedTask``'s end on ``call``; whether it has ended."""
    status = task.get("status")
    if status == "completed":
        content = task.get("result", {}).get("content") or [{}]
        call.answer("result", str(content[0].get("text")), now)
    elif status == "failed":
        call.answer("error", reason_of({"error": task.get("error", {})}), now)
    elif status == "cancelled":
        call.answer("error", "task_cancelled", now)
    else:
        return False
    return True
