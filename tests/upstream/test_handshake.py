"""proxy/upstream/handshake.py: the one driver that initializes a server on the proxy's
behalf, and the stdio respawn that uses it with the client's own params.

The HTTP upstream's 404 re-initialize replaying the client's own params is checked in
``test_http_upstream_failures.py`` (``test_404_with_nothing_in_flight_reinitializes_upstream``
compares the replayed ``params`` with the client's).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from proxy.config_upstream import UpstreamConfig
from proxy.core.errors import UpstreamStartFailed
from proxy.core.handshake import HandshakeStep
from proxy.core.jsonrpc import Message, classify
from proxy.upstream.base import UpstreamContext
from proxy.upstream.handshake import ClientHandshake, OwnRequests, initialize
from proxy.upstream.stdio import StdioUpstream
from tests.support import eventually

INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def client_initialize(rid: int = 1) -> dict[str, Any]:
    # Params no proxy would make up: a replay can only have taken them from the client.
    params = {
        "protocolVersion": "2025-06-18",
        "capabilities": {"roots": {"listChanged": True}, "x-client-only": {}},
        "clientInfo": {"name": "the-client-itself", "version": "7.7.7"},
    }
    return {"jsonrpc": "2.0", "id": rid, "method": "initialize", "params": params}


# ------------------------------------------------------------------ the driver
async def test_initialize_asks_checks_then_notifies() -> None:
    calls: list[Any] = []

    async def ask(method: str, params: dict[str, Any], timeout: float) -> Message:
        calls.append(("ask", method, params, timeout))
        return classify({"jsonrpc": "2.0", "id": "x", "result": {"protocolVersion": "v"}})

    result = await initialize(ask, lambda msg: calls.append(("send", msg)), {"a": 1}, 5.0)
    assert result == {"protocolVersion": "v"}
    assert calls == [("ask", "initialize", {"a": 1}, 5.0), ("send", INITIALIZED)]


async def test_initialize_awaits_an_async_send() -> None:
    sent: list[dict[str, Any]] = []

    async def ask(method: str, params: dict[str, Any], timeout: float) -> Message:
        return classify({"jsonrpc": "2.0", "id": 1, "result": {}})

    async def send(msg: dict[str, Any]) -> None:
        await asyncio.sleep(0)
        sent.append(msg)

    assert await initialize(ask, send, {}, 1.0) == {}
    assert sent == [INITIALIZED]


@pytest.mark.parametrize(
    "answer",
    [
        {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "no"}},
        {"jsonrpc": "2.0", "id": 1, "result": ["not", "an", "object"]},
    ],
)
async def test_a_refused_initialize_sends_nothing_more(answer: dict[str, Any]) -> None:
    sent: list[dict[str, Any]] = []

    async def ask(method: str, params: dict[str, Any], timeout: float) -> Message:
        return classify(answer)

    with pytest.raises(UpstreamStartFailed, match="the MCP server refused initialize"):
        await initialize(ask, sent.append, {}, 1.0)
    assert sent == []


def test_the_client_handshake_is_what_the_core_marked() -> None:
    seen = ClientHandshake()
    payload = json.dumps(client_initialize()).encode()
    seen.sent(None, payload)  # an unmarked payload is not looked into, whatever it holds
    assert seen.request is None and seen.params == {}
    seen.sent(HandshakeStep.INITIALIZED, b"{}")  # not before an initialize
    assert not seen.initialized
    seen.sent(HandshakeStep.INITIALIZE, payload)
    assert seen.params == client_initialize()["params"]
    seen.sent(HandshakeStep.INITIALIZED, json.dumps(INITIALIZED).encode())
    assert seen.initialized


# ------------------------------------------------------------------ stdio respawn
# Logs every line it reads to the file named by argv[1]; answers requests; exits on "crash".
RECORDER = r"""
import json, sys
log = open(sys.argv[1], "a")
for line in sys.stdin:
    log.write(line); log.flush()
    m = json.loads(line)
    if m.get("method") == "crash":
        sys.exit(1)
    if "id" in m:
        result = {"protocolVersion": "2025-06-18"} if m["method"] == "initialize" else {}
        print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": result}), flush=True)
"""


async def _recording_upstream(tmp_path: Path) -> tuple[StdioUpstream, Path, list[str], list[str]]:
    script, seen = tmp_path / "recorder.py", tmp_path / "seen.jsonl"
    script.write_text(RECORDER)
    closed: list[str] = []
    restarted: list[str] = []
    config = UpstreamConfig(command=[sys.executable, str(script), str(seen)])
    up = StdioUpstream(
        UpstreamContext(
            config,
            "test-session-id",
            on_message=lambda m, origin: None,
            on_closed=closed.append,
            on_restarted=restarted.append,
        )
    )
    await up.start()
    return up, seen, closed, restarted


def _lines(seen: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in seen.read_text().splitlines()] if seen.exists() else []


async def test_a_respawned_server_gets_the_clients_own_initialize_params(tmp_path: Path) -> None:
    up, seen, closed, restarted = await _recording_upstream(tmp_path)
    try:
        up.send(json.dumps(client_initialize()).encode(), HandshakeStep.INITIALIZE)
        up.send(json.dumps(INITIALIZED).encode(), HandshakeStep.INITIALIZED)
        up.send(b'{"jsonrpc":"2.0","id":2,"method":"crash"}')

        def replayed() -> list[dict[str, Any]]:
            inits = [m for m in _lines(seen) if m.get("method") == "initialize"]
            return inits if len(inits) == 2 and _lines(seen)[-1] == INITIALIZED else []

        inits = await eventually(replayed, timeout=20.0, what="the replayed initialize")
        assert restarted and not closed
        assert inits[0] == client_initialize()
        assert inits[1]["id"] == "mcp-resume-proxy/restart/1"
        assert inits[1]["params"] == client_initialize()["params"]  # not the proxy's own
    finally:
        await up.stop()


async def test_an_unmarked_initialize_is_not_sniffed(tmp_path: Path) -> None:
    """Only the core's mark makes a payload the client's initialize: a server that exits
    after an unmarked one never had a session to restart (it failed its start)."""
    up, seen, closed, restarted = await _recording_upstream(tmp_path)
    try:
        up.send(json.dumps(client_initialize()).encode())
        up.send(json.dumps(INITIALIZED).encode())
        up.send(b'{"jsonrpc":"2.0","id":2,"method":"crash"}')
        await eventually(lambda: bool(closed), timeout=20.0, what="the session to be over")
        assert restarted == []
        assert closed[0].startswith("exited with code 1")
        assert len([m for m in _lines(seen) if m.get("method") == "initialize"]) == 1
    finally:
        await up.stop()


# ------------------------------------------------------------------ the proxy's own requests
async def test_own_requests_mark_the_proxys_initialize_and_take_their_answers() -> None:
    sent: list[tuple[dict[str, Any], HandshakeStep | None]] = []
    own = OwnRequests(lambda payload, step: sent.append((json.loads(payload), step)), "own/")

    async def answer_each() -> None:
        await eventually(lambda: bool(sent), what="the initialize")
        request = sent[-1][0]
        assert not own.answered(classify({"jsonrpc": "2.0", "id": 1, "result": {}}))  # ints
        assert own.answered(classify({"jsonrpc": "2.0", "id": request["id"], "result": {}}))

    answering = asyncio.ensure_future(answer_each())
    result = await initialize(own.ask, own.notify, {"p": 1}, 5.0)
    await answering
    assert result == {}
    assert sent == [
        (
            {"jsonrpc": "2.0", "id": "own/1", "method": "initialize", "params": {"p": 1}},
            HandshakeStep.INITIALIZE,
        ),
        (INITIALIZED, HandshakeStep.INITIALIZED),
    ]


async def test_own_requests_fail_when_unanswered_or_gone() -> None:
    own = OwnRequests(lambda payload, step: None, "own/")
    with pytest.raises(UpstreamStartFailed, match=r"did not answer ping within 0\.05 s"):
        await own.ask("ping", {}, 0.05)
    asking = asyncio.ensure_future(own.ask("initialize", {}, 5.0))
    await asyncio.sleep(0)
    own.gone("exited with code 1")
    with pytest.raises(UpstreamStartFailed, match="went away: exited with code 1"):
        await asking
