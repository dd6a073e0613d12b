"""``mcp-resume-proxy connect URL`` (the stdio shim, DESIGN.md D5), all real: the proxy in
front of the SDK-built legacy fixture, the shim as a subprocess launched by the official
``mcp`` SDK stdio client (or driven by hand over its pipes), and between the shim and the
proxy a TCP forwarder (tests/cut_proxy.py) that cuts its connections.

Replay a random test with the seed it printed: ``pytest --seed <seed>`` (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
import pytest
from mcp.client.session import ClientRequestContext, ClientSession, ElicitationFnT
from mcp.shared.exceptions import MCPError

from tests.balancer import balancer
from tests.cut_proxy import CutProxy
from tests.downstream.shim_support import forwarder, sdk_host, shim_log, spawn_shim
from tests.e2e.sdk_client import text_of
from tests.support import (
    FIXTURE,
    ROOT,
    RunningProxy,
    eventually,
    initialize_request,
    run_proxy,
    run_proxy_on,
)

N = 2000
CUTS = 60
DEADLINE = 120.0  # generous: every call here takes seconds at most


@asynccontextmanager
async def rig(
    tmp_path: Path,
    *extra: str,
    elicitation: ElicitationFnT | None = None,
    sse: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[RunningProxy, CutProxy, ClientSession]]:
    """The proxy, the forwarder in front of it, and an SDK host running the shim on it."""
    async with (
        run_proxy(tmp_path, FIXTURE, sse=sse or {}) as proxy,
        forwarder(proxy) as cut,
        sdk_host(tmp_path, cut.url(), *extra, elicitation=elicitation) as host,
    ):
        yield proxy, cut, host


async def sessions_at(proxy: RunningProxy) -> int:
    async with aiohttp.ClientSession() as http, http.get(proxy.base + "/healthz") as resp:
        return int((await resp.json())["sessions"])


async def test_burst_survives_random_cuts_of_the_shims_connection(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    async with rig(tmp_path) as (proxy, cut, host):
        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        # From 2,000 bytes on: the call's response headers and priming event (its
        # first event id) come first, and a cut before them would leave the request's
        # fate unknown (answered with an error by design, tested below).
        cut.schedule_cuts([rng.randrange(2000, N * 220) for _ in range(CUTS)])
        result = await asyncio.wait_for(
            host.call_tool("burst", {"n": N, "size": 200}, progress_callback=on_progress),
            DEADLINE,
        )
        assert text_of(result) == f"burst {N}"
        await eventually(lambda: len(seen) >= N, what="every progress notification", timeout=10)
        first_bad = next((i for i, p in enumerate(seen) if p != i + 1), None)
        assert first_bad is None, (
            f"gap or duplicate at {first_bad}: {seen[max(0, first_bad - 3) : first_bad + 3]}"
        )
        assert len(seen) == N
        assert cut.cuts >= CUTS // 2, f"only {cut.cuts} cuts landed"
        log = shim_log(tmp_path)
        resumes = [line for line in log.splitlines() if "stream_resumed" in line]
        assert len([r for r in resumes if 'stream="request' in r]) >= CUTS // 2, log[-3000:]


async def test_paced_call_survives_resets_of_every_connection(tmp_path: Path, seed: int) -> None:
    """Connection resets of the request stream and the standalone stream at once."""
    rng = random.Random(seed)
    steps = 40
    cut_at = set(rng.sample(range(1, steps), 8))
    async with rig(tmp_path) as (proxy, cut, host):
        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)
            if int(progress) in cut_at:
                cut.cut_all(reset=True)

        result = await asyncio.wait_for(
            host.call_tool("slow", {"steps": steps, "delay": 0.05}, progress_callback=on_progress),
            DEADLINE,
        )
        assert text_of(result) == f"done {steps}"
        await eventually(lambda: len(seen) >= steps, what="every progress notification", timeout=10)
        assert seen == [float(i) for i in range(1, steps + 1)]
        assert cut.cuts >= len(cut_at)
        assert (await host.list_tools()).tools, "the session goes on"


async def test_server_closes_are_polled_after_retry(tmp_path: Path) -> None:
    """The proxy ends long response streams on purpose after ``retry:`` (SEP-1699): the
    shim waits that long and resumes, and the host sees one unbroken call."""
    sse = {"max_stream_seconds": 0.3, "retry_ms": 100}
    async with rig(tmp_path, sse=sse) as (proxy, cut, host):
        seen: list[float] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append(progress)

        result = await asyncio.wait_for(
            host.call_tool("slow", {"steps": 30, "delay": 0.05}, progress_callback=on_progress),
            DEADLINE,
        )
        assert text_of(result) == "done 30"
        await eventually(lambda: len(seen) >= 30, what="every progress notification", timeout=10)
        assert seen == [float(i) for i in range(1, 31)]
        assert cut.cuts == 0
        assert shim_log(tmp_path).count('stream="request') >= 2, "the proxy closed it twice"


async def test_elicitation_answered_while_every_connection_is_reset(tmp_path: Path) -> None:
    """A server request reaches the host, the connections drop, the host's answer goes
    out on a new one and the call's stream resumes to its result."""
    cuts: list[CutProxy] = []

    async def answer_it(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert cuts[0].cut_all(reset=True) >= 1
        return types.ElicitResult(action="accept", content={"answer": "forty-two"})

    async with rig(tmp_path, elicitation=answer_it) as (proxy, cut, host):
        cuts.append(cut)
        result = await asyncio.wait_for(host.call_tool("ask", {"question": "?"}), DEADLINE)
        assert text_of(result) == "forty-two"
        assert "stream_resumed" in shim_log(tmp_path)


async def test_post_is_retried_while_the_proxy_refuses_connections(tmp_path: Path) -> None:
    async with rig(tmp_path) as (proxy, cut, host):
        # initialize, initialized and the standalone GET are all connected first.
        await eventually(lambda: cut.connections >= 3, what="the standalone stream")
        await cut.refuse()
        cut.cut_all()
        call = asyncio.ensure_future(host.call_tool("echo", {"text": "again"}))
        try:
            await eventually(
                lambda: "proxy_unreachable" in shim_log(tmp_path), what="the shim to retry"
            )
            assert not call.done()
            await cut.accept()
            result = await asyncio.wait_for(call, DEADLINE)
        finally:
            call.cancel()
        assert text_of(result) == "again"
        assert len(cut.session_ids) == 1, "the same session all along"


async def test_proxy_unreachable_for_too_long_is_an_error(tmp_path: Path) -> None:
    async with rig(tmp_path, "--reconnect-max-seconds", "1") as (proxy, cut, host):
        await eventually(lambda: cut.connections >= 3, what="the standalone stream")
        await cut.refuse()
        cut.cut_all()
        with pytest.raises(MCPError) as caught:
            await asyncio.wait_for(host.call_tool("echo", {"text": "x"}), DEADLINE)
        assert caught.value.error.code == -32000
        assert caught.value.error.data == {"reason": "proxy_unreachable"}
        await cut.accept()
        result = await asyncio.wait_for(host.call_tool("echo", {"text": "y"}), DEADLINE)
        assert text_of(result) == "y"


async def test_request_cut_before_any_reply_is_not_sent_twice(tmp_path: Path) -> None:
    async with rig(tmp_path) as (proxy, cut, host):
        # initialize, initialized and the standalone GET are all connected first.
        await eventually(lambda: cut.connections >= 3, what="the standalone stream")
        cut.cut_before_reply()
        with pytest.raises(MCPError) as caught:
            await asyncio.wait_for(host.call_tool("echo", {"text": "x"}), DEADLINE)
        assert caught.value.error.code == -32000
        assert caught.value.error.data == {"reason": "outcome_unknown"}
        assert "outcome is unknown" in caught.value.error.message
        result = await asyncio.wait_for(host.call_tool("echo", {"text": "y"}), DEADLINE)
        assert text_of(result) == "y"
        assert bytes(cut.sent_to_server).count(b'"text":"x"') == 1, "sent once only"


async def test_a_balancers_502_after_the_request_left_is_an_unknown_outcome(
    tmp_path: Path,
) -> None:
    """A real HAProxy between the shim and the proxy: the replica's connection breaks
    after the POST reached it (a replica killed mid-request), so the balancer answers
    502 with its own HTML page. The request may have run: the host gets
    ``outcome_unknown``, never the bare status, and it is not sent again."""
    async with (
        run_proxy(tmp_path, FIXTURE) as proxy,
        forwarder(proxy) as cut,
        balancer(tmp_path / "haproxy", [cut.port]) as lb,
        sdk_host(tmp_path, lb.url) as host,
    ):
        await lb.wait_up()
        warm = await asyncio.wait_for(host.call_tool("echo", {"text": "w"}), DEADLINE)
        assert text_of(warm) == "w"  # the host's notifications have gone before it
        cut.cut_before_reply()
        with pytest.raises(MCPError) as caught:
            await asyncio.wait_for(host.call_tool("echo", {"text": "x"}), DEADLINE)
        assert caught.value.error.code == -32000
        assert caught.value.error.data == {"reason": "outcome_unknown", "status": 502}
        assert "HTTP 502" in caught.value.error.message
        result = await asyncio.wait_for(host.call_tool("echo", {"text": "y"}), DEADLINE)
        assert text_of(result) == "y"
        assert bytes(cut.sent_to_server).count(b'"text":"x"') == 1, "sent once only"


async def test_an_answer_a_balancer_lost_with_502_is_sent_again(tmp_path: Path) -> None:
    """The host's answer to an elicitation goes out through HAProxy to a replica that dies
    before reading it: the balancer answers 502 with its own page. A response may be sent
    again (the proxy drops one that matches no open request): the shim sends it again and
    the call gets its result, instead of waiting forever for an answer that was lost."""
    cuts: list[CutProxy] = []

    async def answer_it(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        cuts[0].drop_next_post()  # the answer's POST
        return types.ElicitResult(action="accept", content={"answer": "forty-two"})

    async with (
        run_proxy(tmp_path, FIXTURE) as proxy,
        forwarder(proxy) as cut,
        balancer(tmp_path / "haproxy", [cut.port]) as lb,
        sdk_host(tmp_path, lb.url, elicitation=answer_it) as host,
    ):
        cuts.append(cut)
        await lb.wait_up()
        result = await asyncio.wait_for(host.call_tool("ask", {"question": "?"}), 30.0)
        assert text_of(result) == "forty-two"
        assert not cut._drop_next_post, "the answer's POST was dropped once"


async def test_session_deleted_under_the_shim(tmp_path: Path) -> None:
    """404: the call in flight gets "session expired at the proxy"; the next request
    starts a new session by replaying the host's initialize, transparently."""
    async with rig(tmp_path) as (proxy, cut, host):
        started = asyncio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            started.set()

        call = asyncio.ensure_future(
            host.call_tool("slow", {"steps": 100, "delay": 0.1}, progress_callback=on_progress)
        )
        try:
            await asyncio.wait_for(started.wait(), DEADLINE)
            assert len(cut.session_ids) == 1
            headers = {
                "Mcp-Session-Id": cut.session_ids[0],
                "MCP-Protocol-Version": "2025-11-25",
            }
            async with (
                aiohttp.ClientSession() as http,
                http.delete(proxy.url, headers=headers) as r,
            ):
                assert r.status == 200
            with pytest.raises(MCPError) as caught:
                await asyncio.wait_for(call, DEADLINE)
        finally:
            call.cancel()
        assert caught.value.error.code == -32001
        assert caught.value.error.message == "session expired at the proxy"
        assert caught.value.error.data == {"reason": "session_expired"}
        result = await asyncio.wait_for(host.call_tool("echo", {"text": "new"}), DEADLINE)
        assert text_of(result) == "new"
        assert len(cut.session_ids) == 2, "a second session was started"
        assert await sessions_at(proxy) == 1
        assert (await host.list_tools()).tools
    assert shim_log(tmp_path).count("session_deleted") == 1, "the new session was deleted"


async def test_a_session_that_ends_as_it_is_started_again_is_started_once_more(
    tmp_path: Path,
) -> None:
    """The shim starts a new session after a 404, and that one ends too before its
    ``notifications/initialized`` lands (its replica lost it): the request waiting is
    sent to a third session, never without a session id (nemesis seed 1820776908:
    ``400 missing_session``)."""
    async with rig(tmp_path) as (proxy, cut, host):
        assert text_of(await asyncio.wait_for(host.call_tool("echo", {"text": "a"}), DEADLINE))

        async def delete(session_id: str) -> None:
            headers = {"Mcp-Session-Id": session_id, "MCP-Protocol-Version": "2025-11-25"}
            async with aiohttp.ClientSession() as http, http.delete(proxy.url, headers=headers):
                pass

        async def end_the_new_one() -> None:
            await delete(cut.session_ids[-1])

        cut.before_forwarding(b"notifications/initialized", end_the_new_one)
        await delete(cut.session_ids[0])
        result = await asyncio.wait_for(host.call_tool("echo", {"text": "b"}), DEADLINE)
        assert text_of(result) == "b"
        assert len(cut.session_ids) == 3, cut.session_ids
    assert "missing_session" not in shim_log(tmp_path)


@pytest.mark.parametrize("ending", ["stdin EOF", "SIGTERM"])
async def test_shim_ends_by_deleting_its_session(tmp_path: Path, ending: str) -> None:
    async with run_proxy(tmp_path, FIXTURE) as proxy, forwarder(proxy) as cut:
        with (tmp_path / "shim.log").open("w") as errlog:
            shim = await spawn_shim(errlog, cut.url())
        assert shim.stdin is not None and shim.stdout is not None
        try:
            lines = [
                b"not json\n",
                json.dumps(initialize_request(client="by-hand")).encode() + b"\n",
            ]
            shim.stdin.write(b"".join(lines))
            await shim.stdin.drain()
            first = json.loads(await asyncio.wait_for(shim.stdout.readline(), DEADLINE))
            assert first["error"]["code"] == -32700 and first["id"] is None
            answer = json.loads(await asyncio.wait_for(shim.stdout.readline(), DEADLINE))
            assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "legacy-fixture"
            shim.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            await shim.stdin.drain()
            await eventually(lambda: cut.connections >= 3, what="the standalone stream")
            assert await sessions_at(proxy) == 1
            if ending == "SIGTERM":
                shim.send_signal(signal.SIGTERM)
            else:
                shim.stdin.close()
            assert await asyncio.wait_for(shim.wait(), 15.0) == 0, shim_log(tmp_path)[-3000:]
            assert await shim.stdout.read() == b"", "nothing but messages on stdout"
            assert await sessions_at(proxy) == 0, "the shim deleted its session"
        finally:
            if shim.returncode is None:
                shim.kill()
                await shim.wait()


async def test_help_explains_the_shim() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        "connect",
        "--help",
        stdout=asyncio.subprocess.PIPE,
        cwd=str(ROOT),
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 30.0)
    assert proc.returncode == 0
    text = out.decode()
    words = ("URL", "--header", "--reconnect-max-seconds", "--connect-timeout-seconds")
    for word in (*words, "--log-level", "Last-Event-ID"):
        assert word in text, word


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["http://127.0.0.1:9/mcp", "--header", "Bearer {secret}"], "expected 'NAME: VALUE'"),
        (["http://127.0.0.1:9/mcp", "--header", "Authorization: ${{SHIM_T}}"], "line break"),
        (["ftp://user:{secret}@h/mcp?token={secret}"], "URL must be http(s)://"),
    ],
)
async def test_the_shims_argument_errors_quote_no_credential(args: list[str], said: str) -> None:
    """What the shim says goes to the host's log: a header without its name (``Bearer
    abc…``), one with a line break, a URL of another scheme are refused (exit 2) without
    the credential in them (the header's text and the URL were quoted)."""
    secret = "shim-secret-1f7c3a9e5b"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        "connect",
        *(arg.format(secret=secret) for arg in args),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=str(ROOT),
        env={"PATH": "/usr/bin:/bin", "SHIM_T": f"Bearer {secret}\r\nX-Injected: 1"},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60.0)
    finally:
        if proc.returncode is None:  # it did not refuse: it serves, until ended here
            proc.kill()
            await proc.wait()
    assert proc.returncode == 2, err
    assert said in err.decode(), err
    assert secret[:10].encode() not in out + err


async def test_a_request_a_draining_proxy_refuses_is_sent_again_until_a_replica_takes_it(
    tmp_path: Path,
) -> None:
    """A rolling deploy under the shim: the replica it talks to drains (SIGTERM) while
    another host's call runs there. The shim's new call is refused (503 proxy_draining:
    not run), so the shim sends it again, honouring Retry-After, until the "balancer" (the
    forwarder, pointed at the new replica) takes it there (a new session: the old one's
    server stays on the old replica); the call in flight on the draining one finishes
    with its result. Nothing is answered with an error."""
    config: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "upstream": {"command": FIXTURE, "stop_grace_seconds": 3},
        "log": {"format": "json", "level": "debug"},
    }
    other = tmp_path / "other"
    for sub in ("old", "new", "other"):
        (tmp_path / sub).mkdir()
    drain = {"MCP_RESUME_PROXY_DRAIN_SECONDS": "60"}
    async with (
        run_proxy_on(tmp_path / "old", config, env=drain) as old,
        run_proxy_on(tmp_path / "new", config) as new,
        forwarder(old) as cut,
        forwarder(old) as other_cut,
        sdk_host(tmp_path, cut.url()) as host,
        sdk_host(other, other_cut.url()) as other_host,
    ):
        progress: list[float] = []

        async def note(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)

        await other_host.list_tools()  # the SDK checks a result against it: not after
        slow = asyncio.ensure_future(
            other_host.call_tool("slow", {"steps": 12, "delay": 0.25}, progress_callback=note)
        )
        echo: asyncio.Future[types.CallToolResult] | None = None
        try:
            await eventually(lambda: bool(progress), what="the slow call to run")
            old.process.send_signal(signal.SIGTERM)
            await eventually(lambda: "proxy_draining" in old.log_text(), what="the drain")
            echo = asyncio.ensure_future(host.call_tool("echo", {"text": "moved"}))
            await eventually(
                lambda: "request_refused_retry" in shim_log(tmp_path), what="a refusal retried"
            )
            assert not echo.done()
            cut.target_port = new.port  # the balancer takes the old replica out
            moved = await asyncio.wait_for(echo, DEADLINE)
            finished = await asyncio.wait_for(slow, DEADLINE)
        finally:
            slow.cancel()
            if echo is not None:
                echo.cancel()
        assert text_of(moved) == "moved"
        assert text_of(finished) == "done 12"
        assert "request_failed" not in shim_log(tmp_path)
        assert await asyncio.wait_for(old.process.wait(), DEADLINE) == 0


@pytest.mark.parametrize(
    ("status", "body", "retry_after", "wait"),
    [
        (
            503,
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x",'
            b'"data":{"reason":"proxy_draining"}}}',
            "1",
            1.0,
        ),
        (
            503,
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x",'
            b'"data":{"reason":"store_unavailable"}}}',
            "120",
            5.0,
        ),  # bounded
        (503, b"<html><body><h1>503 Service Unavailable</h1>", None, 0.0),  # a balancer's
        (
            503,
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x",'
            b'"data":{"reason":"owner_unreachable"}}}',
            "1",
            None,
        ),  # may have run
        (502, b"<html>bad gateway</html>", None, None),  # may have reached a replica
        (
            429,
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x",'
            b'"data":{"reason":"rate_limited"}}}',
            "3",
            None,
        ),
        (
            503,
            b'{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"x",'
            b'"data":{"reason":"proxy_draining"}}}',
            "soon",
            0.0,
        ),  # unreadable: at once
    ],
)
def test_which_refusals_say_the_request_did_not_run(
    status: int, body: bytes, retry_after: str | None, wait: float | None
) -> None:
    from proxy.shim.http import retry_after_refusal

    assert retry_after_refusal(status, body, retry_after) == wait
