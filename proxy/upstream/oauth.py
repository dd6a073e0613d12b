"""OAuth access tokens the proxy obtains and refreshes itself for an HTTP upstream that
requires them (DESIGN.md §7 outbound; MCP 2025-06-18 … 2026-07-28 basic/authorization,
where the proxy is the MCP client). The client's own token never goes upstream.

One :class:`UpstreamCredentials` per server, shared by all its sessions (client sessions,
the modern pool's, readiness probes: :func:`credentials_for`), so that one refresh serves
them all and a rotated refresh token is used once.

- ``client_credentials`` (RFC 6749 §4.4): a token is asked for with ``resource`` (RFC
  8707) and the configured scopes, and again before it expires.
- ``authorization_code``: the tokens ``mcp-resume-proxy login`` left in the token file
  (:mod:`proxy.upstream.oauth_tokens`); the access token is refreshed (RFC 6749 §6, with
  ``resource``) ``refresh_before_seconds`` before it expires, and the file written again.

A token is renewed at most once more, when the server answers 401 to it (the caller
passes it back as ``stale``). What cannot be cured (not signed in, a refresh token
refused or revoked, no credentials, a missing scope) is :class:`UpstreamUnauthorized`,
whose message names the server and what to do. No token is ever logged.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import structlog

from proxy.backoff import Backoff
from proxy.config import DEFAULT_SERVER, ConfigError
from proxy.config_upstream import UpstreamConfig
from proxy.core.errors import (
    UPSTREAM_FORBIDDEN,
    UPSTREAM_UNAUTHORIZED,
    ProxyError,
    UpstreamStartFailed,
)
from proxy.core.protocol import SERVER_ERROR
from proxy.upstream.oauth_meta import (
    DiscoveryError,
    TokenAnswer,
    TokenRefused,
    authorization_server,
    bearer_challenge,
    canonical_resource,
    endpoint_of,
    protected_resource,
    token_request,
)
from proxy.upstream.oauth_tokens import (
    StoredTokens,
    TokenFile,
    TokenFileError,
    default_token_file,
)

log = structlog.get_logger("proxy.upstream.oauth")

UNAUTHORIZED = UPSTREAM_UNAUTHORIZED
FORBIDDEN = UPSTREAM_FORBIDDEN
REFUSED_FIRST_S = 2.0  # a refused client-credentials grant: asked again after 1-2 s, ...
REFUSED_CAP_S = 60.0  # ... doubling up to 30-60 s


class UpstreamUnauthorized(UpstreamStartFailed):
    """The upstream refuses the proxy (401 or 403) and the proxy cannot cure it: the
    message names the server and what to do; ``data`` carries both (docs/errors.md)."""

    jsonrpc_code = SERVER_ERROR
    reason = UNAUTHORIZED

    def __init__(self, server: str, why: str, action: str, *, reason: str = UNAUTHORIZED) -> None:
        super().__init__(f"upstream {server!r} refuses the proxy: {why}; {action}")
        self.reason = reason
        self.data = {"reason": reason, "server": server, "action": action}


def section(server: str) -> str:
    """The key path of a server's upstream settings, for messages."""
    return "upstream" if server == DEFAULT_SERVER else f"servers.{server}"


def login_action(server: str) -> str:
    name = "" if server == DEFAULT_SERVER else f" {server}"
    return f"run `mcp-resume-proxy login{name}` to sign in again"


def no_credentials(server: str, status: int) -> UpstreamUnauthorized:
    """A server without ``oauth`` answered 401/403."""
    return UpstreamUnauthorized(
        server,
        f"it requires authorization (HTTP {status}) and the proxy has no credentials for it",
        f"set {section(server)}.oauth (then run `mcp-resume-proxy login` for "
        f"authorization_code) or an Authorization header in {section(server)}.headers",
    )


class UpstreamCredentials:
    """One server's OAuth tokens: :meth:`bearer` gives a usable access token."""

    def __init__(self, server: str, upstream: UpstreamConfig) -> None:
        self.server = server
        self.oauth = oauth = upstream.oauth
        self.url = upstream.url or ""
        self.resource = oauth.resource or canonical_resource(self.url)
        path = Path(oauth.token_file) if oauth.token_file else default_token_file(server)
        self.file = TokenFile(path) if oauth.grant == "authorization_code" else None
        self._tokens: StoredTokens | None = None
        self._stamp: tuple[int, int] | str | None = "unread"  # the file's, when last read
        self._refused: str | None = None  # why the current credentials cannot work
        # A refused client-credentials grant is asked again only after a backoff (1-2 s,
        # doubling up to a minute): sessions opening meanwhile get the same error at once,
        # and the authorization server is not hammered by every new session.
        self._retry = Backoff(first=REFUSED_FIRST_S, cap=REFUSED_CAP_S)
        self._refused_until = 0.0  # time.monotonic() before which the refusal stands
        self._refused_grant: str | None = None  # why, for client credentials
        self._token_endpoint: str | None = oauth.token_endpoint
        self._lock: asyncio.Lock | None = None
        self._lock_loop: asyncio.AbstractEventLoop | None = None

    # ------------------------------------------------------------------ what the upstream asks
    async def bearer(self, http: aiohttp.ClientSession, stale: str | None = None) -> str:
        """A usable access token; a new one if the current is ``stale`` (refused with 401)
        or expires within ``refresh_before_seconds``. ``UpstreamUnauthorized`` when none
        can be had; ``UpstreamStartFailed`` when the authorization server cannot be reached."""
        async with self._locked():
            self._reload()
            tokens = self._tokens
            if self._refused is not None:  # until the token file changes (a new login)
                raise self._unauthorized(self._refused)  # or, client credentials, a backoff
            if self._refused_grant is not None and time.monotonic() < self._refused_until:
                raise self._unauthorized(self._refused_grant)
            if tokens is not None and tokens.access_token != stale and self._fresh(tokens):
                return tokens.access_token
            await self._renew(http, stale is not None)
            assert self._tokens is not None
            return self._tokens.access_token

    def action(self) -> str:
        """What an operator does when the server refuses the proxy's tokens."""
        if self.oauth.grant == "authorization_code":
            return login_action(self.server)
        return f"check {section(self.server)}.oauth (client_id, client_secret, scopes, resource)"

    def insufficient_scope(self, scope: str | None) -> UpstreamUnauthorized:
        """The server answered 403 ``insufficient_scope`` (2025-11-25 §Scope Challenge)."""
        needed = f"scope {scope!r}" if scope else "more scope"
        where = f"{section(self.server)}.oauth.scopes"
        then = " and run `mcp-resume-proxy login`" if self.file is not None else ""
        return UpstreamUnauthorized(
            self.server,
            f"its token lacks {needed} (HTTP 403 insufficient_scope)",
            f"add it to {where}{then}",
            reason=FORBIDDEN,
        )

    def refused_token(self, status: int, renewed: bool) -> UpstreamUnauthorized:
        """The server refused the proxy's token (a 403, or a 401 to one just renewed:
        its audience, its scopes, or the server's own rules)."""
        which = "a token just renewed" if renewed else "the proxy's token"
        return self._unauthorized(f"it refuses {which} (HTTP {status})")

    # ------------------------------------------------------------------ internals
    def _locked(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock_loop is not loop:
            self._lock, self._lock_loop = asyncio.Lock(), loop
        return self._lock

    def _unauthorized(self, why: str) -> UpstreamUnauthorized:
        return UpstreamUnauthorized(self.server, why, self.action())

    def _fresh(self, tokens: StoredTokens) -> bool:
        if tokens.expires_at is None:
            return True  # unknown: used until the server refuses it
        return tokens.expires_at - time.time() > self.oauth.refresh_before_seconds

    def _reload(self) -> None:
        """Take the token file again when it changed (a new ``login``)."""
        if self.file is None:
            return
        stamp = self.file.stamp()
        if stamp == self._stamp:
            return
        try:
            self._tokens = self.file.read()
        except ProxyError as exc:
            self._tokens, self._refused = None, exc.message
            self._stamp = stamp
            return
        self._stamp, self._refused = stamp, None
        if self._tokens is None:
            self._refused = "no one has signed in for it yet"
        elif self._tokens.resource not in (None, self.resource):
            self._refused = "the saved tokens are for another resource"

    async def _renew(self, http: aiohttp.ClientSession, refused: bool) -> None:
        try:
            if self.file is None:
                answer = await self._client_credentials(http)
                self._tokens = StoredTokens(
                    answer.access_token,
                    self._token_endpoint or "",
                    self.oauth.client_id or "",
                    self.resource,
                    answer.expires_at,
                )
                self._refused_grant = None
                self._retry.reset()
                log.info("upstream_token_obtained", upstream=self.server, expires_in=_left(answer))
            else:
                await self._refresh(http)
        except TokenRefused as exc:
            log.warning("upstream_token_refused", upstream=self.server, error=exc.error)
            why = f"the authorization server refused the proxy's {self._grant_name()} ({exc.error})"
            if self.file is not None:
                self._refused = why  # until the file changes (a new login)
            else:
                self._refused_grant = why
                self._refused_until = time.monotonic() + self._retry.next_delay()
            raise self._unauthorized(why) from None
        except DiscoveryError as exc:
            raise UpstreamStartFailed(
                f"upstream {self.server!r}: no token: {exc.message}", http_status=502
            ) from None
        except ConfigError as exc:
            raise self._unauthorized(str(exc)) from None
        except TokenFileError as exc:  # refreshed, but not kept: a rotated token is lost
            self._refused = exc.message
            raise self._unauthorized(exc.message) from None
        if refused:
            log.info("upstream_token_renewed_after_401", upstream=self.server)

    def _grant_name(self) -> str:
        return "client credentials" if self.file is None else "refresh token"

    async def _client_credentials(self, http: aiohttp.ClientSession) -> TokenAnswer:
        endpoint = self._token_endpoint or await self._discover_token_endpoint(http)
        self._token_endpoint = endpoint
        form = {"grant_type": "client_credentials", "resource": self.resource}
        if self.oauth.scopes:
            form["scope"] = " ".join(self.oauth.scopes)
        secret = self.oauth.resolved_secret(section(self.server))
        return await token_request(http, endpoint, form, self.oauth.client_id or "", secret)

    async def _discover_token_endpoint(self, http: aiohttp.ClientSession) -> str:
        issuer = self.oauth.issuer
        if issuer is None:
            issuer = (await protected_resource(http, self.url)).authorization_server
            if issuer is None:
                raise DiscoveryError(
                    "the server names no authorization server: set oauth.issuer or "
                    "oauth.token_endpoint"
                )
        return endpoint_of(await authorization_server(http, issuer), "token_endpoint")

    async def _refresh(self, http: aiohttp.ClientSession) -> None:
        tokens = self._tokens
        assert self.file is not None and tokens is not None
        if tokens.refresh_token is None:
            self._refused = "its access token expired and no refresh token was given"
            raise self._unauthorized(self._refused)
        form = {
            "grant_type": "refresh_token",
            "refresh_token": tokens.refresh_token,
            "resource": self.resource,
        }
        secret = tokens.client_secret
        if secret is None and self.oauth.client_secret is not None:
            secret = self.oauth.resolved_secret(section(self.server))
        endpoint = self.oauth.token_endpoint or tokens.token_endpoint
        answer = await token_request(http, endpoint, form, tokens.client_id, secret)
        self._tokens = StoredTokens(
            answer.access_token,
            tokens.token_endpoint,
            tokens.client_id,
            self.resource,
            answer.expires_at,
            answer.refresh_token or tokens.refresh_token,  # rotated, or kept
            answer.scope or tokens.scope,
            tokens.issuer,
            tokens.client_secret,
        )
        self.file.write(self._tokens)
        self._stamp = self.file.stamp()
        log.info("upstream_token_refreshed", upstream=self.server, expires_in=_left(answer))


def _left(answer: TokenAnswer) -> float | None:
    return None if answer.expires_at is None else round(answer.expires_at - time.time())


_SHARED: dict[tuple[str, str, str], UpstreamCredentials] = {}


def credentials_for(server: str, upstream: UpstreamConfig) -> UpstreamCredentials | None:
    """The one :class:`UpstreamCredentials` of ``server`` (None without ``oauth``)."""
    if not upstream.oauth.enabled:
        return None
    key = (server, upstream.url or "", repr(upstream.oauth))
    found = _SHARED.get(key)
    if found is None:
        found = _SHARED[key] = UpstreamCredentials(server, upstream)
    return found


def refusal(
    server: str,
    credentials: UpstreamCredentials | None,
    status: int,
    www_authenticate: str | None,
    renewed: bool,
) -> UpstreamUnauthorized | None:
    """What a 401/403 from the upstream means: None when renewing the token may cure it
    (a 401 to a token not yet renewed for it), else the error for the request."""
    challenge = bearer_challenge(www_authenticate)
    if credentials is None:
        return no_credentials(server, status)
    if status == 403 and challenge.get("error") == "insufficient_scope":
        return credentials.insufficient_scope(challenge.get("scope"))
    if status == 401 and not renewed:
        return None
    return credentials.refused_token(status, renewed)
