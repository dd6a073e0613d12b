"""A real authorization server for the tests: npm ``oidc-provider`` (a certified OpenID
provider), run by ``tests/oauth_as/provider.mjs`` as our child, configured as the MCP
authorization spec expects (PKCE S256, dynamic client registration, RFC 8707 resource
indicators giving JWT access tokens whose ``aud`` is the requested resource, client
credentials, refresh tokens, revocation, introspection). Login and consent are approved
at once, so a headless client gets its code by following redirects (:func:`approve`).

- :func:`auth_server` starts one (a context manager); the fixture ``oauth_server``
  (registered in ``tests/conftest.py``) gives a module one.
- :func:`client_credentials_token`, :func:`authorize` (code + PKCE, headless),
  :func:`refresh`, :func:`revoke`, :func:`register` speak to it as a client would.

``scripts/install-oidc-provider.sh`` installs it (``scripts/test`` runs it); without it the
fixture fails, never skips.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import aiohttp
import pytest

from tests.support import STARTUP_S

REPO = Path(__file__).resolve().parent.parent
NODE = REPO / ".tools" / "node_modules" / ".bin" / "node"  # Node 22 (install-node-tools.sh)
ENTRY = REPO / ".tools" / "oidc" / "node_modules" / "oidc-provider" / "lib" / "index.js"
PROVIDER = Path(__file__).resolve().parent / "oauth_as" / "provider.mjs"
MISSING = "oidc-provider is not installed: run scripts/install-oidc-provider.sh (scripts/test does)"

CONFIDENTIAL_CLIENT = "confidential-client"  # client_credentials, code, refresh; a secret
PUBLIC_CLIENT = "public-client"  # code + PKCE, refresh; no secret
REDIRECT_URI = "http://127.0.0.1:9/callback"  # the static clients' (never fetched)
SCOPES = ("mcp:read", "mcp:tools", "mcp:admin")
STOP_S = 10.0


@dataclass
class AuthServer:
    """A running test authorization server."""

    issuer: str  # "http://127.0.0.1:PORT", no trailing slash
    client_secret: str  # the confidential client's
    scopes: tuple[str, ...]
    process: subprocess.Popen[bytes]

    def endpoint(self, path: str) -> str:
        return f"{self.issuer}{path}"

    @property
    def jwks_uri(self) -> str:
        return self.endpoint("/jwks")

    @property
    def token_endpoint(self) -> str:
        return self.endpoint("/token")

    @property
    def authorization_endpoint(self) -> str:
        return self.endpoint("/auth")

    @property
    def registration_endpoint(self) -> str:
        return self.endpoint("/reg")

    @property
    def revocation_endpoint(self) -> str:
        return self.endpoint("/token/revocation")

    @property
    def introspection_endpoint(self) -> str:
        return self.endpoint("/token/introspection")

    @property
    def metadata_url(self) -> str:
        """Its discovery document (OpenID Connect Discovery; RFC 8414 fields)."""
        return self.endpoint("/.well-known/openid-configuration")

    def jwt_auth(self, **more: Any) -> dict[str, Any]:
        """The proxy's ``auth`` section trusting this server's tokens."""
        return {"jwt": {"jwks_url": self.jwks_uri, "issuer": self.issuer, **more}}


@contextmanager
def auth_server(*, access_ttl: int = 300, scopes: tuple[str, ...] = SCOPES) -> Iterator[AuthServer]:
    """Start a test authorization server; stop it on exit. ``access_ttl``: access tokens'
    lifetime in seconds (short to test refresh)."""
    if not (NODE.exists() and ENTRY.exists()):
        pytest.fail(MISSING, pytrace=False)
    secret = secrets.token_urlsafe(24)
    env = {
        "PATH": "/usr/bin:/bin",
        "OIDC_PROVIDER_ENTRY": str(ENTRY),
        "PORT": "0",
        "ACCESS_TTL": str(access_ttl),
        "SCOPES": " ".join(scopes),
        "CONFIDENTIAL_SECRET": secret,
        "REDIRECT_URI": REDIRECT_URI,
    }
    process = subprocess.Popen(
        [str(NODE), str(PROVIDER)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # only its in-memory-adapter warning
    )
    try:
        issuer = _read_issuer(process)
        yield AuthServer(issuer=issuer, client_secret=secret, scopes=scopes, process=process)
    finally:
        process.terminate()
        try:
            process.wait(STOP_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def _read_issuer(process: subprocess.Popen[bytes]) -> str:
    """The issuer from the server's first stdout line (printed once it listens)."""
    assert process.stdout is not None
    deadline = time.monotonic() + STARTUP_S
    line = b""
    while not line.endswith(b"\n"):
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(f"the test authorization server did not start ({process.poll()=})")
        line += process.stdout.readline()
    return str(json.loads(line)["issuer"])


@pytest.fixture(scope="module")
def oauth_server() -> Iterator[AuthServer]:
    """A test authorization server for a whole module."""
    with auth_server() as server:
        yield server


# ------------------------------------------------------------------ speaking to it
def _basic(client_id: str, secret: str | None) -> dict[str, str]:
    """Client authentication: HTTP Basic with the secret (``client_secret_basic``), or
    none (a public client names itself in the form)."""
    if secret is None:
        return {}
    return {"Authorization": aiohttp.encode_basic_auth(client_id, secret)}


async def _token(
    server: AuthServer, form: dict[str, str], client_id: str, secret: str | None
) -> dict[str, Any]:
    """POST to the token endpoint; the JSON answer (``error`` in it when refused)."""
    if secret is None:
        form = {**form, "client_id": client_id}
    async with (
        aiohttp.ClientSession() as http,
        http.post(server.token_endpoint, data=form, headers=_basic(client_id, secret)) as answer,
    ):
        found: dict[str, Any] = await answer.json(content_type=None)
        return found


async def client_credentials_token(
    server: AuthServer, *, resource: str, scope: str = "mcp:read"
) -> dict[str, Any]:
    """A token from the client credentials grant (RFC 6749 §4.4) for ``resource``."""
    form = {"grant_type": "client_credentials", "resource": resource, "scope": scope}
    return await _token(server, form, CONFIDENTIAL_CLIENT, server.client_secret)


def pkce_pair() -> tuple[str, str]:
    """A PKCE verifier and its S256 challenge (RFC 7636)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


async def approve(authorization_url: str, *, issuer: str | None = None) -> str:
    """Follow the authorization server's redirects from ``authorization_url`` (login and
    consent approve at once, cookies kept as a browser would) until one leaves it: that
    redirect URL (the client's ``redirect_uri`` with ``code`` and ``state``), not fetched."""
    base = issuer or f"{urlsplit(authorization_url).scheme}://{urlsplit(authorization_url).netloc}"
    jar = aiohttp.CookieJar(unsafe=True)  # cookies for an IP address host
    url = authorization_url
    async with aiohttp.ClientSession(cookie_jar=jar) as http:
        for _ in range(10):
            async with http.get(url, allow_redirects=False) as answer:
                location = answer.headers.get("Location")
                if location is None:
                    text = await answer.text()
                    raise AssertionError(f"no redirect from {url}: {answer.status} {text[:300]}")
            url = urljoin(url, location)
            if not url.startswith(base + "/"):
                return url
    raise AssertionError("too many redirects at the authorization server")


async def authorize(
    server: AuthServer,
    *,
    resource: str,
    scope: str = "mcp:read",
    client_id: str = PUBLIC_CLIENT,
    secret: str | None = None,
    redirect_uri: str = REDIRECT_URI,
    login: str = "alice",
) -> dict[str, Any]:
    """The authorization code grant with PKCE, headless, for ``resource``: the token answer
    (``access_token``, ``refresh_token``, …)."""
    verifier, challenge = pkce_pair()
    state = secrets.token_urlsafe(12)
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "scope": scope,
        "resource": resource,
        "state": state,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "login_hint": login,
    }
    back = await approve(
        f"{server.authorization_endpoint}?{urlencode(query)}", issuer=server.issuer
    )
    params = parse_qs(urlsplit(back).query)
    if "code" not in params:
        raise AssertionError(f"no code in the redirect: {params.get('error')}")
    assert params["state"] == [state]
    form = {
        "grant_type": "authorization_code",
        "code": params["code"][0],
        "redirect_uri": redirect_uri,
        "code_verifier": verifier,
        "resource": resource,
    }
    return await _token(server, form, client_id, secret)


async def refresh(
    server: AuthServer,
    refresh_token: str,
    *,
    resource: str | None = None,
    client_id: str = PUBLIC_CLIENT,
    secret: str | None = None,
) -> dict[str, Any]:
    """The refresh token grant: the token answer (``error`` in it when refused)."""
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token}
    if resource is not None:
        form["resource"] = resource
    return await _token(server, form, client_id, secret)


async def revoke(
    server: AuthServer, token: str, *, client_id: str = PUBLIC_CLIENT, secret: str | None = None
) -> None:
    """Revoke a token (RFC 7009): a refresh token revoked cannot be used again."""
    form = {"token": token}
    if secret is None:
        form["client_id"] = client_id
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            server.revocation_endpoint, data=form, headers=_basic(client_id, secret)
        ) as answer,
    ):
        assert answer.status == 200, await answer.text()


async def register(server: AuthServer, **metadata: Any) -> dict[str, Any]:
    """Dynamic client registration (RFC 7591): the registered client's information."""
    body = {
        "redirect_uris": [REDIRECT_URI],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        **metadata,
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(server.registration_endpoint, json=body) as answer,
    ):
        found: dict[str, Any] = await answer.json(content_type=None)
        assert answer.status == 201, found
        return found
