"""``mcp-resume-proxy login NAME``: sign in once to an upstream that requires OAuth, and
keep the tokens for the proxy (its ``oauth.grant: authorization_code``).

The MCP client's part of 2025-06-18 … 2026-07-28 basic/authorization, done by the proxy:

1. the server's protected-resource metadata (RFC 9728: its 401's ``resource_metadata``,
   else the well-known URLs) names the authorization server, unless ``oauth.issuer`` does;
2. that server's metadata (RFC 8414, or OpenID Connect Discovery) gives its endpoints; it
   must support PKCE S256 (2025-11-25 §Authorization Code Protection);
3. with no ``oauth.client_id``, a client is registered (RFC 7591) whose redirect URI is a
   loopback port of this command (RFC 8252 §7.3);
4. the authorization URL (code + PKCE, RFC 7636; ``resource``, RFC 8707; ``state``) is
   printed, for a person to open in a browser; the browser comes back to the loopback
   port with the code (``state`` and, when sent, ``iss`` (RFC 9207) checked);
5. the code is exchanged (with ``resource`` and the verifier) and the tokens written to
   the token file (mode 0600), with what refreshing them needs.

Nothing here prints or logs a token. A test drives it headless: it reads the printed URL,
lets the authorization server approve it, and requests the redirect itself.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import web

from proxy.config_upstream import UpstreamConfig
from proxy.core.errors import ProxyError
from proxy.upstream.oauth import UpstreamCredentials, section
from proxy.upstream.oauth_meta import (
    TIMEOUT,
    DiscoveryError,
    TokenRefused,
    authorization_server,
    endpoint_of,
    protected_resource,
    token_request,
)
from proxy.upstream.oauth_tokens import StoredTokens

CALLBACK_PATH = "/callback"
DONE_PAGE = "<!doctype html><title>Signed in</title><p>Signed in. You can close this window."


class LoginError(ProxyError):
    """The sign-in cannot be completed; the message says why."""


def pkce_pair() -> tuple[str, str]:
    """A PKCE code verifier and its S256 challenge (RFC 7636 §4.1, §4.2)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class Callback:
    """The loopback HTTP server the browser is redirected to; ``wait`` gives the query."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._got: asyncio.Future[dict[str, str]] | None = None
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}{CALLBACK_PATH}"

    async def start(self) -> None:
        self._got = asyncio.get_running_loop().create_future()
        app = web.Application()
        app.router.add_get(CALLBACK_PATH, self._arrived)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", self._port))
        except OSError as exc:
            sock.close()
            raise LoginError(f"cannot listen on 127.0.0.1:{self._port}: {exc.strerror}") from None
        self.port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock).start()

    async def wait(self, timeout: float) -> dict[str, str]:
        assert self._got is not None
        try:
            return await asyncio.wait_for(asyncio.shield(self._got), timeout)
        except TimeoutError:
            raise LoginError(f"no sign-in came back within {timeout:g} s") from None

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _arrived(self, request: web.Request) -> web.Response:
        assert self._got is not None
        if not self._got.done():
            self._got.set_result(dict(request.query))
        if "code" not in request.query:
            return web.Response(status=400, text="Sign-in failed: see the terminal.")
        return web.Response(text=DONE_PAGE, content_type="text/html")


async def login(
    server: str,
    upstream: UpstreamConfig,
    announce: Callable[[str, str], None],
    timeout: float,
) -> Path:
    """Sign in to ``server`` (``announce(url, redirect_uri)`` shows the URL to open); the
    token file written. ``LoginError``/``ProxyError`` say why not."""
    oauth = upstream.oauth
    if oauth.grant != "authorization_code":
        raise LoginError(
            f"{section(server)}.oauth.grant is {oauth.grant!r}: login is for authorization_code"
        )
    credentials = UpstreamCredentials(server, upstream)
    assert credentials.file is not None
    callback = Callback(oauth.redirect_port)
    async with aiohttp.ClientSession() as http:
        info = await protected_resource(http, credentials.url)
        issuer = oauth.issuer or info.authorization_server
        if issuer is None:
            raise LoginError(
                f"the server names no authorization server (RFC 9728): set "
                f"{section(server)}.oauth.issuer"
            )
        meta = await authorization_server(http, issuer)
        authorize_at = endpoint_of(meta, "authorization_endpoint")
        token_at = oauth.token_endpoint or endpoint_of(meta, "token_endpoint")
        if "S256" not in (meta.get("code_challenge_methods_supported") or []):
            raise LoginError("the authorization server does not say it supports PKCE S256")
        scopes = oauth.scopes or info.scopes()
        # 2026-07-28 §Refresh Tokens: a client MAY ask for offline_access when the
        # authorization server lists it (some issue refresh tokens only then).
        if "offline_access" in (meta.get("scopes_supported") or []) and scopes:
            scopes = [*scopes, "offline_access"] if "offline_access" not in scopes else scopes
        await callback.start()
        try:
            client_id, secret, issued_secret = oauth.client_id, None, None
            if client_id is None:
                client_id, issued_secret = await _register(http, meta, callback.redirect_uri)
                secret = issued_secret
            else:
                secret = oauth.resolved_secret(section(server))
            verifier, challenge = pkce_pair()
            state = secrets.token_urlsafe(16)
            query = {
                "response_type": "code",
                "client_id": client_id,
                "redirect_uri": callback.redirect_uri,
                "state": state,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
                "resource": credentials.resource,
            }
            if scopes:
                query["scope"] = " ".join(scopes)
            sep = "&" if "?" in authorize_at else "?"
            announce(f"{authorize_at}{sep}{urlencode(query)}", callback.redirect_uri)
            back = await callback.wait(timeout)
        finally:
            await callback.stop()
        if back.get("state") != state:
            raise LoginError("the redirect carried another state: start again")
        # RFC 9207 §2.4 as 2026-07-28 §Authorization Response Validation applies it: a
        # present iss is compared as it is; an absent one is refused when promised.
        if "iss" in back and back["iss"] != issuer:
            raise LoginError("the redirect names another issuer (RFC 9207): start again")
        if "iss" not in back and meta.get("authorization_response_iss_parameter_supported"):
            raise LoginError("the redirect carries no iss though the server promised it")
        if "error" in back:
            raise LoginError(f"the authorization server refused: {back['error'][:100]}")
        if "code" not in back:
            raise LoginError("the redirect carried no code")
        form = {
            "grant_type": "authorization_code",
            "redirect_uri": callback.redirect_uri,
            "code_verifier": verifier,
            "resource": credentials.resource,
        }
        form["code"] = back["code"]
        try:
            answer = await token_request(http, token_at, form, client_id, secret)
        except TokenRefused as exc:
            raise LoginError(f"the code was refused: {exc.error}") from None
    tokens = StoredTokens(
        answer.access_token,
        token_at,
        client_id,
        credentials.resource,
        answer.expires_at,
        answer.refresh_token,
        answer.scope,
        issuer,
        issued_secret,
    )
    credentials.file.write(tokens)
    return credentials.file.path


async def _register(
    http: aiohttp.ClientSession, meta: dict[str, Any], redirect_uri: str
) -> tuple[str, str | None]:
    """Dynamic client registration (RFC 7591 §3): a client id (and its secret, if the
    server issued one) for this redirect URI."""
    try:
        endpoint = endpoint_of(meta, "registration_endpoint")
    except DiscoveryError:
        raise LoginError(
            "the authorization server offers no dynamic client registration: set oauth.client_id"
        ) from None
    body = {
        "client_name": "mcp-resume-proxy",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }
    try:
        async with http.post(endpoint, json=body, timeout=TIMEOUT) as resp:
            data = await resp.json(content_type=None)
            status = resp.status
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise LoginError(f"client registration failed ({type(exc).__name__})") from None
    if status not in (200, 201) or not isinstance(data, dict):
        error = data.get("error") if isinstance(data, dict) else None
        raise LoginError(f"client registration refused: HTTP {status} {error or ''}".strip())
    client_id = data.get("client_id")
    if not isinstance(client_id, str):
        raise LoginError("client registration gave no client_id")
    secret = data.get("client_secret")
    return client_id, secret if isinstance(secret, str) else None
