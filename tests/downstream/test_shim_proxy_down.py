"""The ``connect`` shim while its proxy is down (issue 20, item 6): at the host's start,
``initialize`` fails within ``--connect-timeout-seconds`` with ``proxy_unreachable`` and
the shim keeps serving; across a graceful (SIGTERM) restart of the proxy, a request the
proxy never took is sent again in a new session (the host's ``initialize`` replayed),
with either store: neither keeps sessions across a restart (docs/stores.md).

All real: proxies as subprocesses on a port held by :func:`reserved_port` (refused while
no proxy listens), a full listen backlog for an address that never answers, the shim
launched by hand or by the official ``mcp`` SDK's stdio client.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog.testing

from proxy.core import jsonrpc
from proxy.shim.http import ProxyLink
from proxy.shim.session import ShimSession
from proxy.shim.stdio import HostPipe
from tests.downstream.shim_support import forwarder, sdk_host, shim_log, spawn_shim
from tests.e2e.sdk_client import text_of
from tests.fixtures.http_harness import black_hole
from tests.support import (
    FIXTURE,
    eventually,
    initialize_request,
    log_events,
    reserved_port,
    run_proxy,
    run_proxy_on,
    tool_call,
)

DEADLINE = 60.0
SECRET = "a-test-secret-of-some-length"


def proxy_config(port: int, store: str, tmp_path: Path) -> dict[str, Any]:
    kind: dict[str, Any] = {"kind": store}
    if store == "sqlite":
        kind["path"] = str(tmp_path / "store.db")
    return {
        "listen": {"host": "127.0.0.1", "port": port},
        "upstream": {"command": FIXTURE, "stop_grace_seconds": 3},
        "store": kind,
        "streams": {"token_secret": SECRET},
        "log": {"format": "json", "level": "debug"},
    }


@contextlib.asynccontextmanager
async def shim_by_hand(tmp_path: Path, url: str, *extra: str) -> AsyncIterator[Any]:
    """The shim on ``url``, its stdin and stdout ours; it must exit 0 at stdin's EOF."""
    with (tmp_path / "shim.log").open("w") as errlog:
        shim = await spawn_shim(errlog, url, *extra)
    try:
        yield shim
        shim.stdin.close()
        assert await asyncio.wait_for(shim.wait(), 15.0) == 0, shim_log(tmp_path)[-3000:]
    finally:
        if shim.returncode is None:
            shim.kill()
            await shim.wait()


async def exchange(shim: Any, message: dict[str, Any], timeout: float = DEADLINE) -> Any:
    """Write one message to the shim and read the next line it writes."""
    shim.stdin.write(json.dumps(message).encode() + b"\n")
    await shim.stdin.drain()
    return json.loads(await asyncio.wait_for(shim.stdout.readline(), timeout))


async def test_initialize_while_the_proxy_refuses_fails_in_time_and_a_later_one_works(
    tmp_path: Path,
) -> None:
    """Refused connections: the host's initialize is answered proxy_unreachable after
    --connect-timeout-seconds (not after --reconnect-max-seconds, 120 here: a wait that
    long would outlast this test's own); the shim stays, and once the proxy is up the
    host's next initialize starts a session."""
    async with reserved_port() as port:
        url = f"http://127.0.0.1:{port}/mcp"
        flags = ("--connect-timeout-seconds", "1", "--reconnect-max-seconds", "120")
        async with shim_by_hand(tmp_path, url, *flags) as shim:
            failed = await exchange(shim, initialize_request(1), timeout=30.0)
            assert failed["id"] == 1
            assert failed["error"]["code"] == -32000
            assert failed["error"]["data"] == {"reason": "proxy_unreachable"}
            assert "tried for 1 s" in failed["error"]["message"]
            async with run_proxy_on(tmp_path, proxy_config(port, "memory", tmp_path)):
                answer = await exchange(shim, initialize_request(2))
                assert answer["result"]["serverInfo"]["name"] == "legacy-fixture"
                shim.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
                echoed = await exchange(shim, tool_call(3, "echo", {"text": "up"}))
                assert echoed["result"]["content"][0]["text"] == "up"


async def test_initialize_toward_an_address_that_never_answers_fails_in_the_default_time(
    tmp_path: Path,
) -> None:
    """No SYN-ACK ever (a full listen backlog drops SYNs, as a blackholed address): the
    connect attempt itself is bounded by the default connect timeout (5 s), and it
    proves the request never went out: proxy_unreachable, not outcome_unknown."""
    with black_hole() as url:
        async with shim_by_hand(tmp_path, url, "--reconnect-max-seconds", "120") as shim:
            failed = await exchange(shim, initialize_request(1), timeout=30.0)
    assert failed["error"]["code"] == -32000
    assert failed["error"]["data"] == {"reason": "proxy_unreachable"}
    assert "no connection to the proxy within" in failed["error"]["message"]
    assert "tried for 5 s" in failed["error"]["message"]
    assert "s3cret" not in shim_log(tmp_path), "the URL's query is never logged"


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_a_request_written_while_the_proxy_restarts_runs_in_a_new_session(
    tmp_path: Path, store: str
) -> None:
    """SIGTERM stops the proxy between two host requests; the second is written while
    it is down (its POST cannot connect and is retried) and runs once the proxy is back:
    the old session is gone (404), so it goes to a new one, the host's initialize
    replayed. Whichever of the POST and the standalone GET meets the 404 first, the
    request is the shim's to send again; the host sees no error."""
    async with reserved_port() as port:
        config = proxy_config(port, store, tmp_path)
        url = f"http://127.0.0.1:{port}/mcp"
        for life in ("first", "second"):
            (tmp_path / life).mkdir()
        async with contextlib.AsyncExitStack() as first:  # the first life: ends mid-test
            await first.enter_async_context(run_proxy_on(tmp_path / "first", config))
            async with sdk_host(tmp_path, url) as host:
                assert text_of(await host.call_tool("echo", {"text": "one"})) == "one"
                await first.aclose()  # SIGTERM; it exits 0
                call = asyncio.ensure_future(host.call_tool("echo", {"text": "two"}))
                try:
                    await eventually(
                        lambda: "proxy_unreachable" in shim_log(tmp_path),
                        what="the shim to retry the POST",
                    )
                    assert not call.done()
                    async with run_proxy_on(tmp_path / "second", config) as second:
                        result = await asyncio.wait_for(call, DEADLINE)
                        started = log_events(second.log_text(), "upstream_started")
                finally:
                    call.cancel()
    assert text_of(result) == "two"
    log = shim_log(tmp_path)
    assert "request_failed" not in log, log[-3000:]
    assert log.count("session_started") == 2, "a second session, at the restarted proxy"
    assert len(started) == 1, "one session (one server process) at the restarted proxy"


async def test_a_404_met_by_another_stream_leaves_a_request_not_yet_taken_to_the_shim(
    tmp_path: Path,
) -> None:
    """The order the restart test meets only by chance, made certain: the standalone
    stream learns that the session is gone (its 404, here told to the session as its
    follower does) while a host request's POST is still being retried, refused by the
    forwarder in front of the proxy. That request never reached the proxy: once the
    forwarder accepts again it goes to a new session, not to an error."""
    out = io.BytesIO()
    async with run_proxy(tmp_path, FIXTURE) as proxy, forwarder(proxy) as cut:
        link = ProxyLink(cut.url(), {})
        session = ShimSession(HostPipe(io.BytesIO(), out), link, reconnect_max_seconds=DEADLINE)
        await link.open()
        try:
            await session.deliver(jsonrpc.classify(initialize_request(1)))
            old = link.session_id
            assert old is not None
            await cut.refuse()
            with structlog.testing.capture_logs() as logs:
                sending = asyncio.ensure_future(
                    session.deliver(jsonrpc.classify(tool_call(2, "echo", {"text": "later"})))
                )
                try:
                    await eventually(
                        lambda: any(e["event"] == "proxy_unreachable" for e in logs),
                        what="its POST to be refused and retried",
                    )
                    session.session_gone(old, "404 on the standalone stream")
                    assert not sending.done()
                    await cut.accept()
                    await asyncio.wait_for(sending, DEADLINE)
                    await eventually(lambda: out.getvalue().count(b"\n") >= 2, what="its answer")
                finally:
                    sending.cancel()
            await session.end_session()
        finally:
            await link.close()
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [a["id"] for a in answers] == [1, 2]
    assert answers[1]["result"]["content"][0]["text"] == "later", answers[1]
    events = [e["event"] for e in logs]
    assert events.count("session_reinitialized") == 1 and "request_failed" not in events
    assert len(cut.session_ids) == 2 and cut.session_ids[0] == old, "a second session"


@pytest.mark.parametrize("flag", ["--connect-timeout-seconds", "--reconnect-max-seconds"])
@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_a_time_that_is_not_positive_is_refused_at_start(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from proxy.shim import main

    assert main(["http://127.0.0.1:1/mcp", flag, value]) == 2
    assert f"{flag} must be > 0" in capsys.readouterr().err
