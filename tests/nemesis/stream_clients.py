"""The nemesis's WebSocket and shim clients, each recording what it was told:

- :class:`WsClient`: a ``/ws`` session (``streams`` declared, event ids in ``_meta``)
  through a cutter in front of the balancer. Its calls stream progress or ask; a broken
  socket is reopened with the session id and the call's stream resumed with
  ``stream/resume`` from the last event id it holds (on whichever replica); a socket
  closed 4404 (the session ended) resumes the stream in a new session, with its token.
- :class:`ShimClient`: the official SDK's stdio client running the shim
  (``mcp-resume-proxy connect``) on a cutter's URL; the shim resumes by itself, the host
  sees progress, questions and one answer per call.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mcp_types as types
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.shared.exceptions import MCPError
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.typing import Subprotocol

from tests.balanced import shim_host
from tests.nemesis.history import Call
from tests.nemesis.http_clients import RETRY_S, SILENT_S, reason_of, within

SESSION_META = "io.github.mcp-resume-proxy/sessionId"
EVENT_META = "io.github.mcp-resume-proxy/eventId"


def event_id_of(msg: dict[str, Any]) -> str | None:
    body = msg.get("params") if "method" in msg else msg.get("result")
    meta = body.get("_meta") if isinstance(body, dict) else None
    value = meta.get(EVENT_META) if isinstance(meta, dict) else None
    return value if isinstance(value, str) else None


class WsClient:
    def __init__(
        self, name: str, url: str, rng: random.Random, clock: Callable[[], float], bound: float
    ) -> None:
        self.name, self.url, self.rng, self.clock, self.bound = name, url, rng, clock, bound
        self.session_id = ""
        self.calls: list[Call] = []
        self._rid = 0

    async def run(self, until: float) -> None:
        while self.clock() < until:
            if not await within(self.bound + 2, self.one_call(), self.calls):
                self.session_id = ""  # start afresh

    def _connect(self, resume: bool) -> Any:
        headers = {"Mcp-Session-Id": self.session_id} if resume else {}
        return connect(
            self.url,
            subprotocols=[Subprotocol("mcp")],
            additional_headers=headers,
            proxy=None,
            open_timeout=10,
        )

    async def one_call(self) -> None:
        self._rid += 1
        rid = self._rid
        if self.rng.random() < 0.7:
            steps = self.rng.randrange(10, 40)
            tool, args, expect = "slow", {"steps": steps, "delay": 0.05}, f"done {steps}"
        else:
            tool, args, expect = "ask", {"question": "?"}, f"answer {rid}"
        call = Call(self.name, "ws", f"{self.name}#{rid}", tool, expect, self.clock())
        self.calls.append(call)
        deadline = call.started + self.bound
        ref: dict[str, str] | None = None
        last: str | None = None
        first = True
        # An answer written to a socket that broke before anything else came may not have
        # arrived: a client sends it again after resuming (the proxy drops a second copy).
        unconfirmed: dict[str, Any] | None = None
        while not call.answers and self.clock() < deadline:
            try:
                async with self._connect(resume=bool(self.session_id)) as ws:
                    if first:
                        first = False
                        call.notes.append(f"connected{' (session)' if self.session_id else ''}")
                        if not self.session_id and (refused := await self.initialize(ws)):
                            call.answer("error", refused, self.clock())
                            return
                        params: dict[str, Any] = {"name": tool, "arguments": args}
                        params["_meta"] = {"progressToken": f"p{rid}"}
                        await send(ws, {"id": rid, "method": "tools/call", "params": params})
                        call.notes.append("sent")
                    elif ref is None or last is None:
                        call.answer("error", "lost_before_id", self.clock())
                        return
                    else:
                        if not self.session_id and (refused := await self.initialize(ws)):
                            call.answer("error", refused, self.clock())
                            return
                        call.notes.append(f"resume after {last}")
                        resume = {**ref, "lastEventId": last}
                        await send(
                            ws, {"id": f"r{rid}", "method": "stream/resume", "params": resume}
                        )
                        if unconfirmed is not None:
                            await send(ws, unconfirmed)
                            call.notes.append("answer sent again")
                    while not call.answers:
                        msg = await recv(ws)
                        last = event_id_of(msg) or last
                        if msg.get("id") != f"r{rid}":  # the call went on: it had the answer
                            unconfirmed = None
                        if msg.get("method") == "notifications/stream/create":
                            stream = msg["params"]["stream"]
                            ref = {k: stream[k] for k in ("streamId", "resumeToken")}
                            # The audit replays it with GET on /mcp, from before seq 1.
                            start = f"{stream['streamId']}.0"
                            call.stream = {"session": self.session_id, "event": start, **ref}
                        elif msg.get("method") == "notifications/progress":
                            call.progress.append(int(msg["params"]["progress"]))
                        elif msg.get("method") == "elicitation/create":
                            answer = {"action": "accept", "content": {"answer": f"answer {rid}"}}
                            unconfirmed = {"id": msg["id"], "result": answer}
                            await send(ws, unconfirmed)
                            call.notes.append("answered a question")
                        elif msg.get("id") == rid and "method" not in msg:
                            if "result" in msg:
                                text = (msg["result"].get("content") or [{}])[0].get("text")
                                call.answer("result", str(text), self.clock())
                            else:
                                call.answer("error", reason_of(msg), self.clock())
                        elif msg.get("id") == f"r{rid}" and "error" in msg:
                            call.answer("error", reason_of(msg), self.clock())
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status in (502, 503, 504):
                    call.notes.append(f"http{status} t={self.clock():.1f}")
                    await asyncio.sleep(RETRY_S)
                    continue
                call.answer("error", f"http{status}", self.clock())
            except ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd is not None else None
                call.notes.append(f"closed {code} t={self.clock():.1f}")
                if code == 4404 and ref is not None and last is not None:
                    # The session ended (its replica lost it): the call's stream outlives
                    # it; a new session resumes it with its token (on any replica).
                    call.notes.append("session ended: resume in a new session")
                    self.session_id = ""
                    await asyncio.sleep(RETRY_S)
                    continue
                if code == 4404:  # /ws's "session not found" (docs/errors.md), no stream yet
                    call.answer("error", "session_not_found", self.clock())
                    self.session_id = ""
                    return
                if code is not None and code >= 4000:
                    call.answer("error", f"closed{code}", self.clock())
                    self.session_id = ""
                    return
                await asyncio.sleep(RETRY_S)
            except (OSError, TimeoutError, WebSocketException) as exc:
                call.notes.append(f"broke t={self.clock():.1f}: {exc!r}"[:100])
                await asyncio.sleep(RETRY_S)
        if call.answers and call.answers[0][0] == "error":
            self.session_id = ""  # a fresh session for the next call

    async def initialize(self, ws: Any) -> str | None:
        """Open a session on ``ws``; the error's reason if it is refused."""
        params = {
            "protocolVersion": "2025-06-18",
            "capabilities": {"streams": {}, "elicitation": {}},
            "clientInfo": {"name": self.name, "version": "0"},
        }
        await send(ws, {"id": 0, "method": "initialize", "params": params})
        while True:  # a new session starts its server first: slower than SILENT_S
            msg = json.loads(await asyncio.wait_for(ws.recv(), self.bound))
            if msg.get("id") == 0:
                if "result" not in msg:
                    return reason_of(msg)
                self.session_id = msg["result"]["_meta"][SESSION_META]
                break
        await send(ws, {"method": "notifications/initialized"})
        return None


async def send(ws: Any, message: dict[str, Any]) -> None:
    await ws.send(json.dumps({"jsonrpc": "2.0", **message}))


async def recv(ws: Any) -> dict[str, Any]:
    try:
        got: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), SILENT_S))
    except TimeoutError:
        ws.transport.abort()
        raise
    return got


class ShimClient:
    def __init__(
        self,
        name: str,
        url: str,
        log_path: Path,
        rng: random.Random,
        clock: Callable[[], float],
        bound: float,
    ) -> None:
        self.name, self.url, self.log_path = name, url, log_path
        self.rng, self.clock, self.bound = rng, clock, bound
        self.calls: list[Call] = []
        self._n = 0

    async def elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"answer": f"answer {self._n}"})

    async def run(self, until: float) -> None:
        while self.clock() < until:
            try:
                async with shim_host(self.log_path, self.url, self.elicit) as host:
                    while self.clock() < until:
                        await self.one_call(host)
            except Exception as exc:  # the host broke: note it on the call, start anew
                if self.calls and not self.calls[-1].answers:
                    self.calls[-1].answer("error", f"shim:{type(exc).__name__}", self.clock())
                await asyncio.sleep(RETRY_S)

    async def one_call(self, host: ClientSession) -> None:
        self._n += 1
        if self.rng.random() < 0.7:
            steps = self.rng.randrange(10, 40)
            tool, args, expect = "slow", {"steps": steps, "delay": 0.05}, f"done {steps}"
        else:
            tool, args, expect = "ask", {"question": "?"}, f"answer {self._n}"
        call = Call(self.name, "shim", f"{self.name}#{self._n}", tool, expect, self.clock())
        self.calls.append(call)

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            call.progress.append(int(progress))

        try:
            result = await asyncio.wait_for(
                host.call_tool(tool, args, progress_callback=on_progress), self.bound
            )
        except MCPError as exc:
            data = exc.error.data
            reason = data.get("reason") if isinstance(data, dict) else None
            call.answer("error", str(reason or f"code{exc.error.code}"), self.clock())
            return
        except TimeoutError:
            return  # left open: the checker says it never ended
        text = "".join(b.text for b in result.content if isinstance(b, types.TextContent))
        call.answer("result", text, self.clock())
