"""Retrofit: an MCP server that requires OAuth (the ``mcp`` SDK's own resource-server auth,
tests/fixtures/oauth_protected_server.py) behind the proxy, with a real authorization
server (npm oidc-provider, tests/oauth_as.py). The proxy gets its tokens itself: client
credentials, or a refresh token from ``mcp-resume-proxy login`` driven headless; it
refreshes before expiry and on a 401; what it cannot cure is a clear error and ``/readyz``
says so. No token reaches its log."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
from mcp import Client

from tests.downstream.sse_client import RawSession, messages
from tests.e2e.sdk_client import connect, text_of
from tests.oauth_as import CONFIDENTIAL_CLIENT, approve, auth_server, revoke
from tests.support import (
    DEADLINE_S,
    MCP_HEADERS,
    ROOT,
    RunningProxy,
    eventually,
    initialize_request,
    log_events,
    run_proxy_on,
    tail,
    wait_listening,
)

SERVER = ROOT / "tests" / "fixtures" / "oauth_protected_server.py"


@asynccontextmanager
async def protected_server(
    tmp_path: Path, issuer: str, scope: str = "mcp:read"
) -> AsyncIterator[str]:
    """The OAuth-protected MCP server (requiring ``scope``); its URL."""
    log_path = tmp_path / "protected.log"
    with log_path.open("wb") as log_file:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(SERVER), "--port", "0", "--issuer", issuer, "--scope", scope,
            stdout=log_file, stderr=log_file, cwd=str(ROOT),
        )  # fmt: skip
    try:
        port = await wait_listening(proc, log_path, "the protected server")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()


def proxy_config(url: str, oauth: dict[str, Any]) -> dict[str, Any]:
    return {
        "listen": {"host": "127.0.0.1", "port": 0},
        "servers": {"remote": {"url": url, **({"oauth": oauth} if oauth else {})}},
        "log": {"format": "json", "level": "debug"},
    }


def code_oauth(tmp_path: Path, **more: Any) -> dict[str, Any]:
    """Sign in once; no scopes set: those the server's metadata names (mcp:read)."""
    return {
        "grant": "authorization_code",
        "token_file": str(tmp_path / "state" / "remote.json"),
        **more,
    }


async def whoami(proxy: RunningProxy) -> dict[str, Any]:
    """Call ``whoami`` through the proxy with the SDK client."""
    async with connect(f"{proxy.base}/servers/remote/mcp") as conn:
        result = await conn.session.call_tool("whoami", {})
        assert not result.is_error, text_of(result)
        found: dict[str, Any] = json.loads(text_of(result))
        return found


async def login(tmp_path: Path, config: dict[str, Any]) -> tuple[int, str]:
    """``mcp-resume-proxy login remote``, driven headless: read the URL it prints, let the
    authorization server approve it, request the redirect it gives. Its exit status and
    what it printed."""
    import yaml

    path = tmp_path / "login.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "proxy", "login", "remote", "--config", str(path),
        "--timeout", "60", stderr=asyncio.subprocess.PIPE, cwd=str(ROOT),
    )  # fmt: skip
    assert proc.stderr is not None
    printed = b""
    try:
        async with asyncio.timeout(DEADLINE_S):
            while True:
                line = await proc.stderr.readline()
                printed += line
                if not line or line.startswith(b"  http"):
                    break
            if line:
                back = await approve(line.decode().strip())
                async with aiohttp.ClientSession() as http, http.get(back) as answer:
                    assert answer.status == 200, await answer.text()
            printed += await proc.stderr.read()
            await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, printed.decode()


async def readyz(proxy: RunningProxy) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.get(f"{proxy.base}/readyz") as resp:
        return resp.status, await resp.json()


def assert_no_secret(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text, "a token reached the log"


# ------------------------------------------------------------------ (a) client credentials
async def test_client_credentials_reach_the_protected_server(tmp_path: Path) -> None:
    with auth_server() as auth:
        async with protected_server(tmp_path, auth.issuer) as url:
            oauth = {
                "grant": "client_credentials",
                "issuer": auth.issuer,
                "client_id": CONFIDENTIAL_CLIENT,
                "client_secret": "${UPSTREAM_SECRET}",
                "scopes": ["mcp:read"],
            }
            env = {"UPSTREAM_SECRET": auth.client_secret}
            config = proxy_config(url, oauth)
            # The token replaces a configured Authorization header (a stale static one).
            config["servers"]["remote"]["headers"] = {"authorization": "Bearer stale"}
            async with run_proxy_on(tmp_path, config, env) as proxy:
                assert (await whoami(proxy))["client_id"] == CONFIDENTIAL_CLIENT
                # A 2026-07-28 client is served from the pool's upstream sessions: same token.
                mcp = f"{proxy.base}/servers/remote/mcp"
                async with Client(mcp, mode="2026-07-28") as modern:
                    result = await modern.call_tool("whoami", {})
                    assert json.loads(text_of(result))["client_id"] == CONFIDENTIAL_CLIENT
                status, body = await readyz(proxy)
                assert status == 200, body
            assert "upstream_token_obtained" in proxy.log_text()
            assert_no_secret(proxy.log_text(), auth.client_secret)


async def test_a_wrong_client_secret_is_a_clear_502_and_not_ready(tmp_path: Path) -> None:
    with auth_server() as auth:
        async with protected_server(tmp_path, auth.issuer) as url:
            oauth = {
                "grant": "client_credentials",
                "token_endpoint": auth.token_endpoint,
                "client_id": CONFIDENTIAL_CLIENT,
                "client_secret": "not-the-secret-at-all",
            }
            async with (
                run_proxy_on(tmp_path, proxy_config(url, oauth)) as proxy,
                aiohttp.ClientSession() as http,
            ):
                init = initialize_request(0, version="2025-11-25")
                mcp = f"{proxy.base}/servers/remote/mcp"
                async with http.post(mcp, json=init, headers=MCP_HEADERS) as resp:
                    assert resp.status == 502
                    error = (await resp.json())["error"]
                assert error["data"]["reason"] == "upstream_unauthorized"
                assert error["data"]["server"] == "remote"
                assert "invalid_client" in error["message"]
                status, body = await readyz(proxy)
                assert status == 503
                assert "invalid_client" in body["upstreams"]["remote"]
                # Sessions opening at once get the same answer without asking the
                # authorization server again each time (a backoff, 1 s at least).
                for _ in range(5):
                    async with http.post(mcp, json=init, headers=MCP_HEADERS) as resp:
                        assert resp.status == 502
                        again = (await resp.json())["error"]
                    assert again["data"]["reason"] == "upstream_unauthorized"
                    assert "invalid_client" in again["message"]
            asked = log_events(proxy.log_text(), "upstream_token_refused")
            assert len(asked) == 1, asked


async def test_a_reload_with_the_right_client_secret_serves_new_sessions(tmp_path: Path) -> None:
    """Changed ``oauth`` settings reach new sessions on a reload: new credentials, not the
    refusal (nor its backoff) that the old ones earned."""
    import yaml

    with auth_server() as auth:
        async with protected_server(tmp_path, auth.issuer) as url:
            oauth = {
                "grant": "client_credentials",
                "token_endpoint": auth.token_endpoint,
                "client_id": CONFIDENTIAL_CLIENT,
                "client_secret": "not-the-secret-at-all",
                "scopes": ["mcp:read"],
            }
            config = proxy_config(url, oauth)
            path = tmp_path / "proxy.yaml"
            path.write_text(yaml.safe_dump(config))
            async with (
                run_proxy_on(tmp_path, config, file=path) as proxy,
                aiohttp.ClientSession() as http,
            ):
                init = initialize_request(0, version="2025-11-25")
                mcp = f"{proxy.base}/servers/remote/mcp"
                async with http.post(mcp, json=init, headers=MCP_HEADERS) as resp:
                    assert resp.status == 502
                oauth["client_secret"] = auth.client_secret
                path.write_text(yaml.safe_dump(config))
                proxy.process.send_signal(signal.SIGHUP)
                await eventually(
                    lambda: log_events(proxy.log_text(), "config_reloaded"), what="the reload"
                )
                assert (await whoami(proxy))["client_id"] == CONFIDENTIAL_CLIENT
            assert_no_secret(proxy.log_text(), auth.client_secret)


# ------------------------------------------------------------------ (b) login, then calls
async def test_login_headless_then_calls_work(tmp_path: Path) -> None:
    with auth_server() as auth:
        async with protected_server(tmp_path, auth.issuer) as url:
            config = proxy_config(url, code_oauth(tmp_path))
            code, printed = await login(tmp_path, config)
            assert code == 0, printed
            token_file = tmp_path / "state" / "remote.json"
            assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
            assert stat.S_IMODE(token_file.parent.stat().st_mode) == 0o700
            saved = json.loads(token_file.read_text())
            assert saved["resource"] == url
            assert saved["scope"] == "mcp:read"  # from the protected-resource metadata
            assert_no_secret(printed, saved["access_token"], saved["refresh_token"])
            async with run_proxy_on(tmp_path, config) as proxy:
                assert (await whoami(proxy))["sub"] == "alice"
            assert_no_secret(proxy.log_text(), saved["access_token"], saved["refresh_token"])


async def test_without_login_the_client_is_told_to_run_login(tmp_path: Path) -> None:
    with auth_server() as auth:
        async with protected_server(tmp_path, auth.issuer) as url:
            config = proxy_config(url, code_oauth(tmp_path))
            async with (
                run_proxy_on(tmp_path, config) as proxy,
                aiohttp.ClientSession() as http,
            ):
                init = initialize_request(0, version="2025-11-25")
                mcp = f"{proxy.base}/servers/remote/mcp"
                async with http.post(mcp, json=init, headers=MCP_HEADERS) as resp:
                    assert resp.status == 502
                    error = (await resp.json())["error"]
                assert "mcp-resume-proxy login remote" in error["data"]["action"]
                assert "signed in" in error["message"]
                status, body = await readyz(proxy)
                assert status == 503
                assert "mcp-resume-proxy login remote" in body["upstreams"]["remote"]


# ------------------------------------------------------------------ (c) refresh
async def test_tokens_are_refreshed_on_expiry_and_on_a_401(tmp_path: Path) -> None:
    with auth_server(access_ttl=3) as auth:
        async with protected_server(tmp_path, auth.issuer) as url:
            config = proxy_config(url, code_oauth(tmp_path, refresh_before_seconds=0))
            code, printed = await login(tmp_path, config)
            assert code == 0, printed
            token_file = tmp_path / "state" / "remote.json"
            first = json.loads(token_file.read_text())
            async with run_proxy_on(tmp_path, config) as proxy:
                await whoami(proxy)
                # Past the access token's expiry: the next call refreshes it first.
                await eventually(
                    lambda: _expired(token_file), timeout=DEADLINE_S, what="the token to expire"
                )
                assert (await whoami(proxy))["sub"] == "alice"
                second = json.loads(token_file.read_text())
                assert second["access_token"] != first["access_token"]
                assert "upstream_token_refreshed" in proxy.log_text()
                # A token the server refuses though it looks fresh: one 401, a refresh, again.
                _write_tokens(token_file, {**second, "access_token": "garbage", "expires_at": 1e10})
                assert (await whoami(proxy))["sub"] == "alice"
                assert "upstream_token_renewed_after_401" in proxy.log_text()
            third = json.loads(token_file.read_text())
            secrets = (first, second, third)
            for tokens in secrets:
                assert_no_secret(proxy.log_text(), tokens["access_token"], tokens["refresh_token"])


def _expired(token_file: Path) -> bool:
    import time

    return bool(json.loads(token_file.read_text())["expires_at"] < time.time())


def _write_tokens(token_file: Path, tokens: dict[str, Any]) -> None:
    temp = token_file.with_suffix(".new")
    temp.write_text(json.dumps(tokens))
    os.chmod(temp, 0o600)
    os.replace(temp, token_file)


# ------------------------------------------------------------------ (d) revoked
async def test_a_revoked_refresh_token_is_a_clear_error_and_not_ready(tmp_path: Path) -> None:
    with auth_server() as auth:
        async with protected_server(tmp_path, auth.issuer) as url:
            config = proxy_config(url, code_oauth(tmp_path))
            code, printed = await login(tmp_path, config)
            assert code == 0, printed
            token_file = tmp_path / "state" / "remote.json"
            async with (
                run_proxy_on(tmp_path, config) as proxy,
                aiohttp.ClientSession() as http,
            ):
                session = RawSession(http, f"{proxy.base}/servers/remote/mcp")
                await session.initialize()
                saved = json.loads(token_file.read_text())
                await revoke(auth, saved["refresh_token"], client_id=saved["client_id"])
                # The access token the server refuses: the proxy must refresh, and cannot.
                _write_tokens(token_file, {**saved, "access_token": "garbage"})
                events = await session.request(1, "tools/call", {"name": "whoami"})
                error = messages(events)[-1]["error"]
                assert error["data"]["reason"] == "upstream_unauthorized", error
                assert error["data"]["server"] == "remote"
                assert "mcp-resume-proxy login remote" in error["message"]
                assert "invalid_grant" in error["message"]
                status, body = await readyz(proxy)
                assert status == 503, body
                assert "mcp-resume-proxy login remote" in body["upstreams"]["remote"]
                # A new login reaches the running proxy: ready again, calls work.
                code, printed = await login(tmp_path, config)
                assert code == 0, printed
                await eventually(
                    lambda: _ready(proxy),
                    timeout=DEADLINE_S,
                    what="/readyz to say ready",
                    interval=0.5,
                )
                assert (await whoami(proxy))["sub"] == "alice"
            assert_no_secret(proxy.log_text(), saved["access_token"], saved["refresh_token"])


async def _ready(proxy: RunningProxy) -> bool:
    status, _ = await readyz(proxy)
    return status == 200


# ------------------------------------------------------------------ no credentials at all
async def test_a_401_without_credentials_names_the_server_and_the_fix(tmp_path: Path) -> None:
    with auth_server() as auth:
        async with protected_server(tmp_path, auth.issuer) as url:
            config = proxy_config(url, {})
            async with (
                run_proxy_on(tmp_path, config) as proxy,
                aiohttp.ClientSession() as http,
            ):
                init = initialize_request(0, version="2025-11-25")
                mcp = f"{proxy.base}/servers/remote/mcp"
                async with http.post(mcp, json=init, headers=MCP_HEADERS) as resp:
                    text = await resp.text()
                answer = (
                    json.loads(text.split("data: ")[-1]) if "data: " in text else json.loads(text)
                )
                error = answer["error"]
                assert error["data"]["reason"] == "upstream_unauthorized", (resp.status, text)
                assert "servers.remote.oauth" in error["data"]["action"]
                assert "HTTP 401" in error["message"]
                status, body = await readyz(proxy)
                assert status == 503
                assert "requires authorization" in body["upstreams"]["remote"], tail(proxy.log_path)


async def initialize_error(proxy: RunningProxy) -> tuple[int, dict[str, Any]]:
    """A new session's ``initialize`` refused: its status and JSON-RPC error."""
    init = initialize_request(0, version="2025-11-25")
    mcp = f"{proxy.base}/servers/remote/mcp"
    async with aiohttp.ClientSession() as http, http.post(mcp, json=init, headers=MCP_HEADERS) as r:
        text = await r.text()
        answer = json.loads(text.split("data: ")[-1] if "data: " in text else text)
        return r.status, answer["error"]


# ------------------------------------------------------------------ scope, unreachable AS
async def test_a_missing_scope_is_named(tmp_path: Path) -> None:
    with auth_server() as auth:
        async with protected_server(tmp_path, auth.issuer, scope="mcp:admin") as url:
            oauth = {
                "grant": "client_credentials",
                "issuer": auth.issuer,
                "client_id": CONFIDENTIAL_CLIENT,
                "client_secret": auth.client_secret,
                "scopes": ["mcp:read"],
            }
            async with run_proxy_on(tmp_path, proxy_config(url, oauth)) as proxy:
                _, error = await initialize_error(proxy)
                assert error["data"]["reason"] == "upstream_forbidden", error
                assert "servers.remote.oauth.scopes" in error["data"]["action"]
                assert "insufficient_scope" in error["message"]


async def test_an_unreachable_authorization_server_is_502_upstream_start_failed(
    tmp_path: Path,
) -> None:
    with auth_server() as auth:
        async with protected_server(tmp_path, auth.issuer) as url:
            oauth = {
                "grant": "client_credentials",
                "token_endpoint": "http://127.0.0.1:9/token",  # discard: nothing listens
                "client_id": CONFIDENTIAL_CLIENT,
                "client_secret": auth.client_secret,
            }
            async with run_proxy_on(tmp_path, proxy_config(url, oauth)) as proxy:
                status, error = await initialize_error(proxy)
                assert status == 502
                assert error["data"]["reason"] == "upstream_start_failed", error
                assert "token endpoint cannot be reached" in error["message"]
