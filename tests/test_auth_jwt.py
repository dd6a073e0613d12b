"""Bearer JWTs (docs/auth.md), with keys made at test time (none committed): the proxy in
front of the demo server accepts a valid token end to end and refuses every kind of bad
one with 401 ``invalid_token``; a JWKS URL served here is fetched at start, refetched on
an unknown ``kid`` (at most every 30 s), refreshed on schedule, and may be down at start.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.asymmetric import ed25519
from jwt.algorithms import OKPAlgorithm

from proxy.config_auth import JwtConfig
from proxy.config_rules import build
from proxy.downstream.auth import InvalidToken, JwtVerifier
from proxy.downstream.jwks import key_set_from
from tests.downstream.sse_client import RawSession, messages
from tests.jwt_issuer import ISSUER, Issuer, an_issuer, bad_tokens, jwt_auth
from tests.support import (
    MCP_HEADERS,
    RunningProxy,
    bearer,
    eventually,
    initialize_request,
    log_events,
    reserved_port,
    run_proxy,
    wait_for_log,
)


async def status_of(proxy: RunningProxy, token: str) -> int:
    """The status of an ``initialize`` with ``token`` (200: accepted)."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            proxy.url, json=initialize_request(), headers={**MCP_HEADERS, **bearer(token)}
        ) as resp,
    ):
        await resp.read()
        if resp.status == 401:
            challenge = resp.headers["WWW-Authenticate"]
            metadata = f"{proxy.base}/.well-known/oauth-protected-resource/mcp"
            assert challenge == (
                f'Bearer realm="mcp-resume-proxy", error="invalid_token", '
                f'resource_metadata="{metadata}"'
            )
            assert (await resp.json())["error"]["data"]["reason"] == "unauthorized"
        return resp.status


# -------------------------------------------------------------------- a JWKS URL
class JwksServer:
    """Serves ``document`` at ``/jwks.json`` and counts the fetches."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.fetches = 0

    async def _serve(self, request: web.Request) -> web.Response:
        self.fetches += 1
        return web.json_response(self.document)

    @contextlib.asynccontextmanager
    async def running(self, port: int) -> AsyncIterator[None]:
        app = web.Application()
        app.router.add_get("/jwks.json", self._serve)
        runner = web.AppRunner(app)
        await runner.setup()
        try:
            await web.TCPSite(runner, "127.0.0.1", port).start()
            yield
        finally:
            await runner.cleanup()


# -------------------------------------------------------------------- tests
async def test_a_valid_jwt_opens_a_session_that_is_its_principals(tmp_path: Path) -> None:
    issuer = Issuer()
    issuer.rsa("r1")
    issuer.ec("e1")
    jwks = issuer.write_jwks(tmp_path / "jwks.json")
    async with run_proxy(tmp_path, auth=jwt_auth(jwks_file=jwks)) as proxy:
        for kid, principal in (("r1", "alice"), ("e1", "carol")):
            headers = bearer(issuer.token(kid, principal))
            async with aiohttp.ClientSession(headers=headers) as http:
                session = RawSession(http, proxy.url)
                await session.initialize()
                listed = messages(await session.request(2, "tools/list"))
                names = {tool["name"] for tool in listed[-1]["result"]["tools"]}
                assert "echo" in names, listed
            # Bob's JWT, as valid, does not reach this principal's session.
            as_bob = {**session.headers(), **bearer(issuer.token(kid, "bob"))}
            async with (
                aiohttp.ClientSession() as http,
                http.post(
                    proxy.url,
                    json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
                    headers=as_bob,
                ) as resp,
            ):
                assert resp.status == 404, await resp.text()
        refused = log_events(proxy.log_text(), "request_refused")
        assert [entry["status"] for entry in refused] == [404, 404]


async def test_every_kind_of_bad_jwt_is_refused(tmp_path: Path) -> None:
    issuer = an_issuer()
    jwks = issuer.write_jwks(tmp_path / "jwks.json", "r1", "e1")
    cases = bad_tokens(issuer)
    async with run_proxy(tmp_path, auth=jwt_auth(jwks_file=jwks, leeway_seconds=5)) as proxy:
        assert await status_of(proxy, issuer.token("r1")) == 200  # the rig itself is right
        for what, (token, _) in cases.items():
            assert await status_of(proxy, token) == 401, what
        refused = log_events(proxy.log_text(), "request_refused")
        log_text = proxy.log_text()
    assert [entry["why"] for entry in refused] == [why for _, why in cases.values()]
    for what, (token, _) in cases.items():
        assert token not in log_text, what


async def test_a_jwks_url_is_fetched_and_refetched_for_a_new_kid(tmp_path: Path) -> None:
    issuer = Issuer()
    issuer.rsa("k1")
    issuer.ec("k2")
    server = JwksServer(issuer.jwks("k1"))
    async with reserved_port() as port, server.running(port):
        url = f"http://127.0.0.1:{port}/jwks.json"
        auth = jwt_auth(jwks_url=url, jwks_refresh_seconds=3600)
        async with run_proxy(tmp_path, auth=auth) as proxy:
            assert server.fetches == 1  # at start, before the proxy listens
            assert await status_of(proxy, issuer.token("k1")) == 200
            server.document = issuer.jwks("k2")  # the issuer rotates its key
            assert await status_of(proxy, issuer.token("k2")) == 200
            assert server.fetches == 2
            # Another unknown kid within 30 s: refused without a fetch (an unknown kid
            # costs an attacker nothing; it must not cost the issuer a request each).
            issuer.rsa("k3")
            assert await status_of(proxy, issuer.token("k3")) == 401
            assert await status_of(proxy, issuer.token("k1")) == 401  # rotated out
            assert server.fetches == 2


async def test_a_jwks_url_is_refreshed_on_schedule(tmp_path: Path) -> None:
    issuer = Issuer()
    issuer.rsa("k1")
    server = JwksServer(issuer.jwks("k1"))
    async with reserved_port() as port, server.running(port):
        auth = jwt_auth(jwks_url=f"http://127.0.0.1:{port}/jwks.json", jwks_refresh_seconds=0.5)
        async with run_proxy(tmp_path, auth=auth) as proxy:
            await eventually(lambda: server.fetches >= 3, what="two scheduled refreshes")
            issuer.ec("k2")
            server.document = issuer.jwks("k1", "k2")
            fetched = server.fetches
            # The second fetch after the change starts once the first one's keys are in.
            await eventually(lambda: server.fetches >= fetched + 2, what="a refresh")
            # k2 came with a scheduled refresh: no refetch for it is needed.
            assert await status_of(proxy, issuer.token("k2")) == 200
            assert "unknown_kid" not in proxy.log_text()


async def test_a_jwks_url_down_at_start_refuses_then_recovers(tmp_path: Path) -> None:
    issuer = Issuer()
    issuer.rsa("k1")
    server = JwksServer(issuer.jwks())
    token = issuer.token("k1")
    async with reserved_port() as port:  # bound, not listening: connections are refused
        auth = jwt_auth(jwks_url=f"http://127.0.0.1:{port}/jwks.json", jwks_refresh_seconds=2)
        async with run_proxy(tmp_path, auth=auth) as proxy:
            await wait_for_log(proxy, "jwks_fetch_failed")
            assert await status_of(proxy, token) == 401
            async with server.running(port):

                async def accepted() -> bool:
                    return await status_of(proxy, token) == 200

                await eventually(accepted, interval=0.2, what="a JWT accepted once the URL is up")
            refusals = [e["why"] for e in log_events(proxy.log_text(), "request_refused")]
            assert set(refusals) == {"unknown_kid"}
            failures = log_events(proxy.log_text(), "jwks_fetch_failed")
            assert failures and all(f["level"] == "warning" for f in failures)


# -------------------------------------------------------------------- keys, in process
def test_only_public_signing_keys_that_fit_are_kept() -> None:
    issuer = Issuer()
    issuer.rsa("r1")
    issuer.ec("e1")
    document = issuer.jwks()
    (rsa_jwk, ec_jwk) = document["keys"]
    ed = ed25519.Ed25519PrivateKey.generate().public_key()
    ed_jwk = {**OKPAlgorithm.to_jwk(ed, as_dict=True), "kid": "ed"}
    document["keys"] += [
        ed_jwk,
        {**rsa_jwk, "kid": "private", "d": "AQAB"},
        {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
        {**rsa_jwk, "kid": "encryption", "use": "enc"},
        {**rsa_jwk, "kid": "named-hs", "alg": "HS256"},
        {**ec_jwk, "kid": "ec-named-rs", "alg": "RS256"},
        {**rsa_jwk},  # kid r1 again
        {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
        "not an object",
    ]
    keys, problems = key_set_from(document, ["RS256", "PS256", "ES256", "EdDSA"])
    assert keys.kids() == ["r1", "e1", "ed"]
    assert [k.algorithms for k in keys.keys] == [
        {"RS256", "PS256"},
        {"ES256"},
        {"EdDSA"},
    ]
    reasons = " | ".join(problems)
    for expected in (
        "holds private key material",
        "a symmetric key",
        "use is 'enc'",
        "alg 'HS256' is not an asymmetric",
        "verifies none of the configured algorithms",
        "kid 'r1' is listed twice",
        "not a valid RSA public key",
        "not a JSON object",
    ):
        assert expected in reasons, (expected, problems)
    assert "AQAB" not in reasons  # never key material
    only_es = key_set_from(issuer.jwks(), ["ES256"])[0]
    assert only_es.kids() == ["e1"]
    assert only_es.find(None) is not None  # one key: a token may omit kid
    assert keys.find(None) is None


async def eddsa_verifier(
    tmp_path: Path, private: ed25519.Ed25519PrivateKey, **settings: Any
) -> JwtVerifier:
    """A started verifier of EdDSA tokens signed by ``private`` (its one key in a JWKS
    file), with ``settings`` of ``auth.jwt`` beside; the caller closes it."""
    jwk = OKPAlgorithm.to_jwk(private.public_key(), as_dict=True)
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    given = {"jwks_file": str(tmp_path / "jwks.json"), "algorithms": ["EdDSA"], **settings}
    verifier = JwtVerifier(build("auth.jwt", JwtConfig, given))
    await verifier.start()
    return verifier


async def test_an_eddsa_token_and_a_kidless_one_with_a_single_key(tmp_path: Path) -> None:
    private = ed25519.Ed25519PrivateKey.generate()
    verifier = await eddsa_verifier(tmp_path, private, issuer=ISSUER)
    try:
        token = jwt.encode(Issuer.claims("erin", aud=None), private, algorithm="EdDSA")
        assert await verifier.principal_for(token) == "erin"
        # No audience configured: aud is not checked; the issuer is.
        token = jwt.encode(Issuer.claims("erin", aud="anyone"), private, algorithm="EdDSA")
        assert await verifier.principal_for(token) == "erin"
        with pytest.raises(InvalidToken) as info:
            claims = Issuer.claims("erin", iss="https://other")
            await verifier.principal_for(jwt.encode(claims, private, algorithm="EdDSA"))
        assert info.value.why == "issuer"
    finally:
        await verifier.close()


async def test_a_tokens_scopes_come_from_its_scope_or_scp_claim(tmp_path: Path) -> None:
    private = ed25519.Ed25519PrivateKey.generate()
    verifier = await eddsa_verifier(tmp_path, private)
    try:
        for extra, scopes in (
            ({"scope": "mcp:read  mcp:tools"}, {"mcp:read", "mcp:tools"}),
            ({"scp": ["mcp:read", 7, ""]}, {"mcp:read"}),
            ({"scp": "a b"}, {"a", "b"}),
            ({"scope": 3}, set()),
            ({}, set()),
        ):
            token = jwt.encode({**Issuer.claims("erin", aud=None), **extra}, private, "EdDSA")
            assert await verifier.verify(token) == ("erin", frozenset(scopes))
    finally:
        await verifier.close()


async def test_a_resource_servers_audiences(tmp_path: Path) -> None:
    """With the audiences of a path (the resource-server role), ``aud`` must name one of
    them, as a string or in a list, whatever the case of its scheme and host and with or
    without a trailing slash; without ``aud`` the token is refused."""
    private = ed25519.Ed25519PrivateKey.generate()
    verifier = await eddsa_verifier(tmp_path, private, issuer=ISSUER)
    accepted = frozenset({"https://mcp.example/servers/a/mcp", "https://mcp.example"})
    try:
        for aud, why in (
            ("https://mcp.example/servers/a/mcp", None),
            ("HTTPS://MCP.example/servers/a/mcp/", None),
            (["https://elsewhere", "https://mcp.example/"], None),
            ("https://mcp.example/servers/b/mcp", "audience"),
            ("https://mcp.example/servers/a/MCP", "audience"),  # a path is case-sensitive
            (["https://elsewhere", 7], "audience"),
            (None, "missing_claim"),
        ):
            token = jwt.encode(Issuer.claims("erin", aud=aud), private, "EdDSA")
            if why is None:
                assert (await verifier.verify(token, accepted))[0] == "erin", aud
                continue
            with pytest.raises(InvalidToken) as info:
                await verifier.verify(token, accepted)
            assert info.value.why == why, aud
    finally:
        await verifier.close()
