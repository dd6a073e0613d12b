"""The proxy as an OAuth resource server (docs/auth.md, MCP authorization 2025-06-18 on):
RFC 9728 metadata per server path and at the root, open and readable by any origin;
every 401 names it; tokens from the real authorization server (tests/oauth_as.py) are
good only for the resource they were issued for (RFC 8707), expired ones are refused,
a missing required scope gets 403 insufficient_scope; the client's token never reaches
an HTTP upstream."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from proxy.config import config_from_mapping
from proxy.config_rules import ConfigError
from tests.fixtures.http_scripted_server import ScriptedServer
from tests.oauth_as import AuthServer, auth_server, client_credentials_token
from tests.support import (
    DEMO,
    MCP_HEADERS,
    RunningProxy,
    bearer,
    eventually,
    initialize_request,
    log_events,
    run_proxy_on,
)

WELL_KNOWN = "/.well-known/oauth-protected-resource"


def two_servers(server: AuthServer, **auth: Any) -> dict[str, Any]:
    """A proxy config: servers ``a`` and ``b`` (``b`` requires ``mcp:tools``) trusting
    ``server``'s tokens."""
    jwt_settings = {"jwks_url": server.jwks_uri, "issuer": server.issuer, **auth.pop("jwt", {})}
    return {
        "listen": {"host": "127.0.0.1", "port": 0},
        "servers": {
            "a": {"command": DEMO, "stop_grace_seconds": 3},
            "b": {"command": DEMO, "stop_grace_seconds": 3, "required_scopes": ["mcp:tools"]},
        },
        "auth": {"jwt": jwt_settings, **auth},
        "log": {"format": "json", "level": "debug"},
    }


@asynccontextmanager
async def proxy_for(tmp_path: Path, config: dict[str, Any]) -> AsyncIterator[RunningProxy]:
    async with run_proxy_on(tmp_path, config) as proxy:
        yield proxy


async def initialize(proxy: RunningProxy, path: str, token: str | None) -> aiohttp.ClientResponse:
    """An ``initialize`` at ``path`` with ``token``: the response, its body read."""
    headers = {**MCP_HEADERS, **(bearer(token) if token else {})}
    async with (
        aiohttp.ClientSession() as http,
        http.post(proxy.base + path, json=initialize_request(), headers=headers) as resp,
    ):
        await resp.read()
        return resp


async def token_for(server: AuthServer, resource: str, scope: str = "mcp:read") -> str:
    answer = await client_credentials_token(server, resource=resource, scope=scope)
    return str(answer["access_token"])


async def test_metadata_per_server_and_at_the_root(
    tmp_path: Path, oauth_server: AuthServer
) -> None:
    config = two_servers(oauth_server, resource={"scopes_supported": ["mcp:read"]})
    async with proxy_for(tmp_path, config) as proxy, aiohttp.ClientSession() as http:
        base = proxy.base
        for path, resource, scopes in (
            ("/servers/a/mcp", f"{base}/servers/a/mcp", ["mcp:read"]),
            ("/servers/b/mcp", f"{base}/servers/b/mcp", ["mcp:read", "mcp:tools"]),
            ("", base, ["mcp:read", "mcp:tools"]),
        ):
            headers = {"Origin": "https://inspector.example"}  # any origin may read it
            async with http.get(base + WELL_KNOWN + path, headers=headers) as resp:
                assert resp.status == 200, path
                assert resp.headers["Access-Control-Allow-Origin"] == "*"
                assert await resp.json() == {
                    "resource": resource,
                    "authorization_servers": [oauth_server.issuer],
                    "bearer_methods_supported": ["header"],
                    "scopes_supported": scopes,
                }
        async with http.options(
            base + WELL_KNOWN + "/servers/a/mcp",
            headers={"Origin": "https://x.example", "Access-Control-Request-Method": "GET"},
        ) as resp:
            assert resp.status == 204
            assert "MCP-Protocol-Version" in resp.headers["Access-Control-Allow-Headers"]
        for unknown in ("/servers/zz/mcp", "/servers/a/ws", "/mcp", "/other"):
            async with http.get(base + WELL_KNOWN + unknown) as resp:
                assert resp.status == 404, unknown
                assert (await resp.json())["error"]["data"]["reason"] == "unknown_server"
        # Every 401 names the document of the path asked (its scope where one is needed).
        refused = await initialize(proxy, "/servers/a/mcp", None)
        assert refused.status == 401
        assert refused.headers["WWW-Authenticate"] == (
            f'Bearer realm="mcp-resume-proxy", resource_metadata="{base}{WELL_KNOWN}/servers/a/mcp"'
        )
        refused = await initialize(proxy, "/servers/b/mcp", "not-a-token")
        assert refused.headers["WWW-Authenticate"] == (
            f'Bearer realm="mcp-resume-proxy", error="invalid_token", scope="mcp:tools", '
            f'resource_metadata="{base}{WELL_KNOWN}/servers/b/mcp"'
        )
        async with http.get(base + "/servers/a/ws") as resp:  # the same resource as its /mcp
            assert resp.status == 401
            assert f'{WELL_KNOWN}/servers/a/mcp"' in resp.headers["WWW-Authenticate"]
        async with http.get(base + "/readyz") as resp:  # not a server's: the root document
            assert f'resource_metadata="{base}{WELL_KNOWN}"' in resp.headers["WWW-Authenticate"]


async def test_the_only_server_has_a_document_at_listen_path_too(
    tmp_path: Path, oauth_server: AuthServer
) -> None:
    config = two_servers(oauth_server)
    config["upstream"] = config.pop("servers")["a"]
    async with proxy_for(tmp_path, config) as proxy, aiohttp.ClientSession() as http:
        for path in ("/mcp", "/servers/default/mcp"):
            async with http.get(proxy.base + WELL_KNOWN + path) as resp:
                assert (await resp.json())["resource"] == proxy.base + path
        # A token for either URI of the one server is good at both.
        token = await token_for(oauth_server, proxy.base + "/mcp")
        for path in ("/mcp", "/servers/default/mcp"):
            assert (await initialize(proxy, path, token)).status == 200


async def test_a_token_is_good_only_for_its_resource(
    tmp_path: Path, oauth_server: AuthServer
) -> None:
    config = two_servers(
        oauth_server,
        jwt={"audience": "https://API.example/mcp"},
        resource={"audiences": ["https://other.example"]},
    )
    async with proxy_for(tmp_path, config) as proxy:
        base = proxy.base
        for_a = await token_for(oauth_server, f"{base}/servers/a/mcp", "mcp:read mcp:tools")
        assert (await initialize(proxy, "/servers/a/mcp", for_a)).status == 200
        # Same issuer, same keys, another resource: refused as invalid_token.
        refused = await initialize(proxy, "/servers/b/mcp", for_a)
        assert refused.status == 401
        assert 'error="invalid_token"' in refused.headers["WWW-Authenticate"]
        elsewhere = await token_for(oauth_server, "http://127.0.0.1:9/mcp", "mcp:tools")
        assert (await initialize(proxy, "/servers/a/mcp", elsewhere)).status == 401
        # The whole proxy (what the root document names), or a configured audience.
        configured = ("https://api.example/mcp", "https://other.example")
        for resource in (base, *configured, base.upper().replace("HTTP://", "http://") + "/"):
            token = await token_for(oauth_server, resource, "mcp:tools")
            assert (await initialize(proxy, "/servers/b/mcp", token)).status == 200, resource
        whys = [e["why"] for e in log_events(proxy.log_text(), "request_refused") if "why" in e]
        assert whys.count("audience") == 2


async def test_an_expired_token_is_refused(tmp_path: Path) -> None:
    with auth_server(access_ttl=1) as server:
        config = two_servers(server, jwt={"leeway_seconds": 0})
        async with proxy_for(tmp_path, config) as proxy:
            token = await token_for(server, f"{proxy.base}/servers/a/mcp")

            async def refused() -> bool:
                return (await initialize(proxy, "/servers/a/mcp", token)).status == 401

            await eventually(refused, what="the token to expire", interval=0.5)
            resp = await initialize(proxy, "/servers/a/mcp", token)
            assert 'error="invalid_token"' in resp.headers["WWW-Authenticate"]
            assert "expired" in [
                e.get("why") for e in log_events(proxy.log_text(), "request_refused")
            ]


async def test_a_missing_required_scope_gets_403_insufficient_scope(
    tmp_path: Path, oauth_server: AuthServer
) -> None:
    config = two_servers(oauth_server, jwt={"required_scopes": ["mcp:read"]})
    async with proxy_for(tmp_path, config) as proxy:
        base = proxy.base
        b = f"{base}/servers/b/mcp"
        for scope, status in (("mcp:read", 403), ("mcp:tools", 403), ("mcp:read mcp:tools", 200)):
            resp = await initialize(
                proxy, "/servers/b/mcp", await token_for(oauth_server, b, scope)
            )
            assert resp.status == status, scope
        resp = await initialize(proxy, "/servers/b/mcp", await token_for(oauth_server, b))
        assert resp.headers["WWW-Authenticate"] == (
            f'Bearer realm="mcp-resume-proxy", error="insufficient_scope", '
            f'scope="mcp:read mcp:tools", resource_metadata="{base}{WELL_KNOWN}/servers/b/mcp"'
        )
        async with aiohttp.ClientSession() as http:
            token = await token_for(oauth_server, b)
            async with http.post(
                b, json=initialize_request(), headers={**MCP_HEADERS, **bearer(token)}
            ) as resp:
                error = (await resp.json())["error"]
        assert error["code"] == -32600 and error["data"]["reason"] == "insufficient_scope"
        assert "mcp:tools" in error["message"]
        # Server a requires only the proxy's own scope.
        a_token = await token_for(oauth_server, f"{base}/servers/a/mcp")
        assert (await initialize(proxy, "/servers/a/mcp", a_token)).status == 200


async def test_the_clients_token_never_goes_upstream(
    tmp_path: Path, oauth_server: AuthServer
) -> None:
    upstream = ScriptedServer()
    await upstream.start()
    try:
        config = two_servers(oauth_server)
        config["servers"] = {"up": {"url": upstream.url}}
        async with proxy_for(tmp_path, config) as proxy, aiohttp.ClientSession() as http:
            url = f"{proxy.base}/servers/up/mcp"
            token = await token_for(oauth_server, url)
            headers = {**MCP_HEADERS, **bearer(token)}
            async with http.post(url, json=initialize_request(), headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                session = resp.headers["Mcp-Session-Id"]
                await resp.read()
            headers |= {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            async with http.post(url, json=call, headers=headers) as resp:
                assert "echo" in await resp.text()
            async with http.delete(url, headers=headers) as resp:
                assert resp.status in (200, 204)
            await upstream.wait_for(lambda: len(upstream.posts()) >= 2, "the list upstream")
        assert upstream.seen
        for seen in upstream.seen:
            assert "authorization" not in seen.headers
            assert all(token not in value for value in seen.headers.values())
    finally:
        await upstream.stop()


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"listen": {"host": "0.0.0.0"}}, "auth.resource.public_url: set it"),
        (
            {"auth": {"resource": {"public_url": "https://mcp.example/base"}}},
            "auth.resource.public_url: expected scheme://host[:port]",
        ),
        (
            {"auth": {"jwt": {"issuer": None}, "resource": {"public_url": "https://x.example"}}},
            "auth.resource.public_url: the resource-server role needs auth.jwt.issuer",
        ),
        ({"auth": {"jwt": {"issuer": None}}}, "servers.b.required_scopes: scopes come from JWTs"),
        (
            {"auth": {"jwt": {"required_scopes": ['a"b']}}},
            "auth.jwt.required_scopes[0]: not a scope",
        ),
        (
            {"auth": {"resource": {"authorization_servers": ["idp.example"]}}},
            "auth.resource.authorization_servers[0]: expected an http(s):// URL",
        ),
    ],
)
def test_each_rule_of_the_resource_server_role(
    changes: dict[str, Any], expected: str, tmp_path: Path
) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_text('{"keys": []}')
    fake = AuthServer("https://idp.example", "", (), None)  # type: ignore[arg-type]
    config = two_servers(fake)
    config["auth"]["jwt"] = {"jwks_file": str(jwks), "issuer": fake.issuer}
    for section, values in changes.items():
        for key, value in values.items():
            current = config[section].get(key)
            config[section][key] = {**current, **value} if isinstance(current, dict) else value
    with pytest.raises(ConfigError) as raised:
        config_from_mapping(config)
    assert any(m.startswith(expected) for m in raised.value.messages), raised.value.messages


def test_a_public_url_lets_the_proxy_listen_beyond_loopback() -> None:
    config = config_from_mapping(
        {
            "listen": {"host": "0.0.0.0"},
            "upstream": {"command": DEMO},
            "auth": {
                "jwt": {"jwks_url": "https://idp.example/jwks", "issuer": "https://idp.example"},
                "resource": {"public_url": "https://MCP.example:8443/"},
            },
        }
    )
    assert config.auth.resource.public_url == "https://MCP.example:8443/"


async def test_resource_uris_come_from_public_url_never_from_host(
    tmp_path: Path, oauth_server: AuthServer
) -> None:
    public = "https://mcp.example:8443"
    config = two_servers(oauth_server, resource={"public_url": public + "/"})
    async with proxy_for(tmp_path, config) as proxy, aiohttp.ClientSession() as http:
        forged = {"Host": "evil.example"}
        async with http.get(proxy.base + WELL_KNOWN + "/servers/a/mcp", headers=forged) as resp:
            assert (await resp.json())["resource"] == f"{public}/servers/a/mcp"
        async with http.post(proxy.base + "/servers/a/mcp", headers=forged) as resp:
            metadata = f'resource_metadata="{public}{WELL_KNOWN}/servers/a/mcp"'
            assert metadata in resp.headers["WWW-Authenticate"]
        # A token for the public URI is good; one for the address it listens on is not.
        good = await token_for(oauth_server, f"{public}/servers/a/mcp")
        assert (await initialize(proxy, "/servers/a/mcp", good)).status == 200
        local = await token_for(oauth_server, f"{proxy.base}/servers/a/mcp")
        assert (await initialize(proxy, "/servers/a/mcp", local)).status == 401


async def test_a_reload_serves_an_added_servers_metadata_naming_its_tool_scopes(
    tmp_path: Path, oauth_server: AuthServer
) -> None:
    config = two_servers(oauth_server)
    path = tmp_path / "proxy.yaml"
    path.write_text(yaml.safe_dump(config))
    async with run_proxy_on(tmp_path, config, file=path) as proxy, aiohttp.ClientSession() as http:
        async with http.get(proxy.base + WELL_KNOWN + "/servers/c/mcp") as resp:
            assert resp.status == 404
        rules = {"require": [{"scope": "mcp:admin", "names": ["countdown"]}]}
        config["servers"]["c"] = {"command": DEMO, "tools": rules}
        path.write_text(yaml.safe_dump(config))
        proxy.process.send_signal(signal.SIGHUP)
        await eventually(lambda: log_events(proxy.log_text(), "config_reloaded"))
        async with http.get(proxy.base + WELL_KNOWN + "/servers/c/mcp") as resp:
            assert resp.status == 200, await resp.text()
            document = await resp.json()
        assert document["resource"] == f"{proxy.base}/servers/c/mcp"
        assert "mcp:admin" in document["scopes_supported"], document
        # A token for the new server is good there, as for the others.
        token = await token_for(oauth_server, f"{proxy.base}/servers/c/mcp")
        assert (await initialize(proxy, "/servers/c/mcp", token)).status == 200
