"""Hosts sign in as the MCP authorization spec says, with the official SDKs' own OAuth
clients: the Python SDK 2.x (``mcp.client.auth.OAuthClientProvider``) and the TypeScript
SDK 1.x and 2.x (``tests/clients/ts_oauth.mjs``) each get a 401 from the proxy, read its
protected-resource metadata, register at the real authorization server
(tests/oauth_as.py: dynamic registration, PKCE, RFC 8707 resource), log in headless, and
call a tool through the proxy with the token they got."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import jwt
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

from tests.oauth_as import NODE, REDIRECT_URI, AuthServer, approve, client_credentials_token
from tests.support import DEMO, ROOT, RunningProxy, log_events, run_proxy_on

TS_CLIENT = ROOT / "tests" / "clients" / "ts_oauth.mjs"
TS_CLIENT2_MODULES = ROOT / ".tools" / "ts-client2" / "node_modules"
TS_DEADLINE_S = 120.0


def proxy_config(server: AuthServer) -> dict[str, Any]:
    """The demo server at ``/servers/demo/mcp``, requiring ``mcp:tools``."""
    return {
        "listen": {"host": "127.0.0.1", "port": 0},
        "servers": {
            "demo": {"command": DEMO, "stop_grace_seconds": 3, "required_scopes": ["mcp:tools"]}
        },
        "auth": {
            "jwt": {"jwks_url": server.jwks_uri, "issuer": server.issuer},
            "resource": {"scopes_supported": ["mcp:read", "mcp:tools"]},
        },
        "log": {"format": "json", "level": "debug"},
    }


class MemoryStorage:
    """The SDK's ``TokenStorage``, in memory."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class HeadlessLogin:
    """The host's browser: follows the authorization URL at the test server (which
    approves at once) and hands the code back."""

    def __init__(self, issuer: str) -> None:
        self.issuer = issuer
        self.redirected_to: str | None = None
        self.authorization_urls: list[str] = []

    async def redirect(self, authorization_url: str) -> None:
        self.authorization_urls.append(authorization_url)
        self.redirected_to = await approve(authorization_url, issuer=self.issuer)

    async def callback(self) -> AuthorizationCodeResult:
        assert self.redirected_to is not None
        query = parse_qs(urlsplit(self.redirected_to).query)
        return AuthorizationCodeResult(
            code=query["code"][0], state=query["state"][0], iss=query.get("iss", [None])[0]
        )


def host_provider(url: str, storage: MemoryStorage, login: HeadlessLogin) -> OAuthClientProvider:
    """The SDK's OAuth client as a host configures it: a public client (PKCE, no secret)
    that registers itself and signs in through ``login``."""
    return OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="python sdk host",
            redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=login.redirect,
        callback_handler=login.callback,
    )


async def echo_through(url: str, provider: OAuthClientProvider, mode: str, text: str) -> str:
    """``echo`` called at ``url`` by the Python SDK client signing in with ``provider``."""
    async with (
        httpx2.AsyncClient(auth=provider, timeout=30.0) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,  # type: ignore[arg-type]
    ):
        result = await client.call_tool("echo", {"text": text})
    return str(result.content[0].text)  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_python_sdk_signs_in_and_calls_a_tool(
    tmp_path: Path, oauth_server: AuthServer, mode: str
) -> None:
    async with run_proxy_on(tmp_path, proxy_config(oauth_server)) as proxy:
        url = f"{proxy.base}/servers/demo/mcp"
        storage, login = MemoryStorage(), HeadlessLogin(oauth_server.issuer)
        provider = host_provider(url, storage, login)
        assert await echo_through(url, provider, mode, "signed in") == "signed in"
        # It asked for this server's URI and the scope the 401 named.
        (asked,) = login.authorization_urls
        query = parse_qs(urlsplit(asked).query)
        assert query["resource"] == [url]
        assert "mcp:tools" in query["scope"][0].split()
        assert storage.tokens is not None
        claims = jwt.decode(storage.tokens.access_token, options={"verify_signature": False})
        assert claims["aud"] == url
        assert_principal_served(proxy, claims["sub"])


@pytest.mark.parametrize("held", ["another_resource", "missing_scope"])
async def test_the_python_sdk_recovers_from_a_refused_token(
    tmp_path: Path, oauth_server: AuthServer, held: str
) -> None:
    """A host holding a token for another resource gets 401 invalid_token, one without
    the scope the server requires 403 insufficient_scope (and steps up, asking for both
    scopes); either way it signs in again and its call goes through."""
    async with run_proxy_on(tmp_path, proxy_config(oauth_server)) as proxy:
        url = f"{proxy.base}/servers/demo/mcp"
        resource = f"{proxy.base}/servers/other/mcp" if held == "another_resource" else url
        scope = "mcp:tools" if held == "another_resource" else "mcp:read"
        answer = await client_credentials_token(oauth_server, resource=resource, scope=scope)
        storage, login = MemoryStorage(), HeadlessLogin(oauth_server.issuer)
        storage.tokens = OAuthToken(
            access_token=answer["access_token"], expires_in=answer["expires_in"], scope=scope
        )
        provider = host_provider(url, storage, login)
        assert await echo_through(url, provider, "legacy", "again") == "again"
        refusals = log_events(proxy.log_text(), "request_refused")
        if held == "another_resource":
            assert [e["why"] for e in refusals] == ["audience"]
        else:
            assert [(e["status"], e["reason"]) for e in refusals] == [(403, "insufficient_scope")]
            (asked,) = login.authorization_urls
            wanted = parse_qs(urlsplit(asked).query)["scope"][0].split()
            assert {"mcp:read", "mcp:tools"} <= set(wanted)


def assert_principal_served(proxy: RunningProxy, principal: str) -> None:
    """The proxy refused the first request (no token) and then served ``principal``."""
    log = proxy.log_text()
    assert any(e.get("why") == "missing" for e in log_events(log, "request_refused"))
    assert principal in log


@pytest.mark.parametrize("sdk", ["1", "2"])
async def test_the_typescript_sdk_signs_in_and_calls_a_tool(
    tmp_path: Path, oauth_server: AuthServer, sdk: str
) -> None:
    async with run_proxy_on(tmp_path, proxy_config(oauth_server)) as proxy:
        url = f"{proxy.base}/servers/demo/mcp"
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "MCP_TS_CLIENT2_MODULES": str(TS_CLIENT2_MODULES),
            "MCP_TOOLS_NODE_MODULES": str(ROOT / ".tools" / "node_modules"),
        }
        done = subprocess.run(
            [str(NODE), str(TS_CLIENT), url, REDIRECT_URI, "--sdk", sdk],
            env=env,
            capture_output=True,
            text=True,
            timeout=TS_DEADLINE_S,
            check=False,
        )
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        assert done.returncode == 0, (done.stdout, done.stderr[-3000:])
        result = next(line for line in lines if "result" in line)
        assert result["result"] == "signed in from typescript"
        asked = next(line for line in lines if "authorization_url" in line)
        query = parse_qs(urlsplit(asked["authorization_url"]).query)
        assert query["resource"] == [url]
        assert "mcp:tools" in query["scope"][0].split()
        assert_principal_served(proxy, "alice")
