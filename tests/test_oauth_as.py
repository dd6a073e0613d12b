"""The test authorization server (tests/oauth_as.py) does what the OAuth tests rely on:
JWT access tokens for the requested resource (RFC 8707), signed by its JWKS; client
credentials; code + PKCE headless; refresh; revocation; dynamic client registration."""

from __future__ import annotations

import aiohttp
import jwt

from tests.oauth_as import (  # the fixture oauth_server: tests/conftest.py
    AuthServer,
    authorize,
    client_credentials_token,
    refresh,
    register,
    revoke,
)

RESOURCE = "http://127.0.0.1:8000/servers/demo/mcp"


async def claims_of(server: AuthServer, token: str) -> dict[str, object]:
    async with aiohttp.ClientSession() as http, http.get(server.jwks_uri) as answer:
        keys = jwt.PyJWKSet.from_dict(await answer.json())
    key = next(k for k in keys.keys if k.key_id == jwt.get_unverified_header(token)["kid"])
    found: dict[str, object] = jwt.decode(
        token, key.key, algorithms=["RS256"], audience=RESOURCE, issuer=server.issuer
    )
    return found


async def test_client_credentials_give_a_jwt_for_the_resource(oauth_server: AuthServer) -> None:
    answer = await client_credentials_token(oauth_server, resource=RESOURCE, scope="mcp:read")
    claims = await claims_of(oauth_server, answer["access_token"])
    assert claims["aud"] == RESOURCE
    assert claims["scope"] == "mcp:read"


async def test_code_with_pkce_then_refresh_then_revoke(oauth_server: AuthServer) -> None:
    answer = await authorize(
        oauth_server, resource=RESOURCE, scope="mcp:read mcp:tools", login="bob"
    )
    claims = await claims_of(oauth_server, answer["access_token"])
    assert (claims["sub"], claims["scope"]) == ("bob", "mcp:read mcp:tools")
    again = await refresh(oauth_server, answer["refresh_token"], resource=RESOURCE)
    assert (await claims_of(oauth_server, again["access_token"]))["sub"] == "bob"
    await revoke(oauth_server, again["refresh_token"])
    refused = await refresh(oauth_server, again["refresh_token"], resource=RESOURCE)
    assert refused["error"] == "invalid_grant"


async def test_a_registered_client_signs_in(oauth_server: AuthServer) -> None:
    client = await register(oauth_server, client_name="a test host")
    answer = await authorize(oauth_server, resource=RESOURCE, client_id=client["client_id"])
    assert (await claims_of(oauth_server, answer["access_token"]))["client_id"] == client[
        "client_id"
    ]
