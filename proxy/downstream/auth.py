"""Inbound authentication: bearer credentials, each naming a principal (docs/auth.md).

With authentication on (``auth.tokens``, ``auth.tokens_file`` or a JWKS in ``auth.jwt``),
every route but ``/healthz``, the protected-resource metadata documents and CORS
preflights (which browsers send without credentials) needs ``Authorization: Bearer
CREDENTIAL``; otherwise ``401`` with ``WWW-Authenticate: Bearer`` (RFC 6750 §3,
``error="invalid_token"`` when one was presented) and a JSON-RPC error body. A credential
is a static token (compared in constant time, every one of them) or else a JWT, verified
against the JWKS keys: the ``kid`` header picks the key, the algorithm must be configured
and fit the key, ``exp`` is required, ``iss`` / ``aud`` are checked when configured, and
the principal is the ``auth.jwt.principal_claim`` claim.

With ``auth.jwt.issuer`` the proxy is also an OAuth resource server
(:mod:`proxy.core.protected_resource`): a JWT's ``aud`` must name the endpoint asked (or
the proxy's base, or a configured audience), every 401 names the metadata document
(``resource_metadata``) and the scopes needed, and a JWT without a required scope gets
``403`` ``insufficient_scope``.

The principal is put on the request (``request[PRINCIPAL]``): sessions, streams, tasks
and MRTR states are bound to it, and another principal gets ``404`` / ``-32602`` for them,
never their data. Neither tokens nor JWTs nor their claims (but the principal) are logged.
"""

from __future__ import annotations

import hmac
import math
import time
from collections.abc import Awaitable, Callable
from functools import cache
from typing import TYPE_CHECKING

import structlog
from aiohttp import web

from proxy.config_auth import (
    AuthConfig,
    JwtConfig,
    auth_enabled,
    describe_sources,
    jwt_enabled,
    load_jwks_file,
    load_tokens,
)
from proxy.config_rules import ConfigError
from proxy.core.errors import InsufficientScope, RateLimited, Unauthorized
from proxy.core.protected_resource import (
    ResourceServer,
    audience_accepted,
    is_metadata,
)
from proxy.core.ratelimit import RateLimiter
from proxy.downstream.jwks import JwksUrl
from proxy.downstream.jwt_times import misshapen_time_claim
from proxy.downstream.wire import error_response
from proxy.jwks_keys import KeySet

if TYPE_CHECKING:
    import jwt

log = structlog.get_logger("proxy.auth")

# Typed request keys (aiohttp's RequestKey: a str key warns NotAppKeyWarning).
PRINCIPAL: web.RequestKey[str | None] = web.RequestKey("mcp_resume_proxy.principal")
# The OAuth scopes a JWT granted; None: a static token or no auth (no scope rule limits it).
SCOPES: web.RequestKey[frozenset[str] | None] = web.RequestKey("mcp_resume_proxy.scopes")
# On a request the authenticator let through.
_AUTHENTICATOR: web.RequestKey[Authenticator] = web.RequestKey("mcp_resume_proxy.authenticator")
_OPEN = frozenset({"/healthz"})
CHALLENGE = 'Bearer realm="mcp-resume-proxy"'


class InvalidToken(Exception):
    """A bearer JWT refused. ``why`` is one word for the log (``expired``, ``issuer``,
    ``signature``, …), never the token or what it claims."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def principal_of(request: web.Request) -> str | None:
    """Who the request comes from (None: authentication is off)."""
    return request.get(PRINCIPAL)


def scopes_of(request: web.Request) -> frozenset[str] | None:
    """The OAuth scopes the request's credential grants: a JWT's ``scope`` (a
    space-separated string, RFC 9068) or ``scp`` (a list or a string) claim, empty when it
    has neither. None when the credential carries no scopes at all (authentication off, or
    a static token): then no scope rule limits it."""
    return request.get(SCOPES)


def granted_scopes(claims: dict[str, object]) -> frozenset[str]:
    """The scopes a JWT's claims grant (see :func:`scopes_of`); a claim of another type
    grants nothing."""
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            return frozenset(value.split())
        if isinstance(value, list):
            return frozenset(v for v in value if isinstance(v, str) and v)
    return frozenset()


def limit_resumes(request: web.Request) -> None:
    """Count one resume or poll (a ``GET`` with ``Last-Event-ID``, a WebSocket reattaching,
    ``stream/poll``, ``stream/resume``, ``tasks/get``) against the request's principal:
    ``RateLimited`` past ``auth.per_principal.resumes_per_minute``."""
    auth = request.get(_AUTHENTICATOR)
    if auth is None:
        return
    principal = principal_of(request)
    wait = auth.resume_allowed(principal, time.monotonic())
    if wait is not None:
        limit = auth.settings.per_principal.resumes_per_minute
        raise RateLimited(
            f"Too many resumes and polls for {principal} (auth.per_principal."
            f"resumes_per_minute={limit}); retry in {max(1, math.ceil(wait))} s",
            wait,
        )


@cache
def _refusals() -> tuple[tuple[type[jwt.PyJWTError], str], ...]:
    """PyJWT's refusals, by the word the log says for them (the first match wins:
    subclasses before their bases)."""
    import jwt

    return (
        (jwt.ExpiredSignatureError, "expired"),
        (jwt.ImmatureSignatureError, "not_yet_valid"),
        (jwt.InvalidIssuerError, "issuer"),
        (jwt.InvalidAudienceError, "audience"),
        (jwt.MissingRequiredClaimError, "missing_claim"),
        (jwt.InvalidSignatureError, "signature"),
        (jwt.InvalidAlgorithmError, "algorithm"),
        (jwt.DecodeError, "malformed"),
    )


class JwtVerifier:
    """Bearer JWTs against the keys of a JWKS file or URL (proxy/downstream/jwks.py).
    PyJWT (and cryptography under it) is loaded here, once JWTs are configured: a proxy
    without them starts without it."""

    def __init__(self, settings: JwtConfig) -> None:
        import jwt

        self._jwt = jwt
        self.settings = settings
        self._file_keys = KeySet()
        self.source: JwksUrl | None = None
        if settings.jwks_url:
            self.source = JwksUrl(
                settings.jwks_url, settings.algorithms, settings.jwks_refresh_seconds
            )

    async def start(self) -> None:
        if self.settings.jwks_file:
            self._file_keys = load_jwks_file(self.settings)
        if self.source is not None:
            await self.source.start()

    async def close(self) -> None:
        if self.source is not None:
            await self.source.close()

    @property
    def keys(self) -> KeySet:
        return self.source.keys if self.source is not None else self._file_keys

    async def principal_for(self, token: str) -> str:
        """The principal a valid JWT names; :class:`InvalidToken` otherwise."""
        principal, _ = await self.verify(token)
        return principal

    async def verify(
        self, token: str, audiences: frozenset[str] | None = None
    ) -> tuple[str, frozenset[str]]:
        """The principal a valid JWT names and the scopes it grants; :class:`InvalidToken`
        otherwise. ``audiences`` (canonical, :mod:`proxy.core.protected_resource`): its
        ``aud`` must name one of them (the resource-server role); None: ``aud`` must name
        ``auth.jwt.audience`` when that is set."""
        s, jwt = self.settings, self._jwt
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise InvalidToken("malformed") from None
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in s.algorithms:
            raise InvalidToken("algorithm")  # "none" and HS* among them: never configured
        if kid is not None and not isinstance(kid, str):
            raise InvalidToken("malformed")
        key = self.keys.find(kid)
        if key is None and self.source is not None:
            key = await self.source.key_for_unknown(kid)
        if key is None:
            raise InvalidToken("unknown_kid")
        if alg not in key.algorithms:
            raise InvalidToken("algorithm")  # e.g. RS256 named for an EC key
        by_pyjwt = audiences is None and s.audience is not None
        required = ["exp"]
        required += ["iss"] if s.issuer is not None else []
        required += ["aud"] if by_pyjwt or audiences is not None else []
        try:
            claims = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                issuer=s.issuer,
                audience=s.audience if by_pyjwt else None,
                leeway=s.leeway_seconds,
                options={"require": required, "verify_aud": by_pyjwt},
            )
        except jwt.PyJWTError as exc:
            why = next((w for kind, w in _refusals() if isinstance(exc, kind)), "invalid")
            raise InvalidToken(why) from None
        if misshapen_time_claim(claims) is not None:  # "exp": "9999999999" passes PyJWT
            raise InvalidToken("claim_type")
        if audiences is not None and not audience_accepted(claims.get("aud"), audiences):
            raise InvalidToken("audience")  # a token for another resource
        principal = claims.get(s.principal_claim)
        if not isinstance(principal, str) or not principal:
            raise InvalidToken("no_principal")
        return principal, granted_scopes(claims)


class Authenticator:
    """Who a request comes from. Owned by the app: :meth:`start` on startup, :meth:`close`
    on cleanup (whatever it fetched or holds ends there)."""

    def __init__(self, settings: AuthConfig) -> None:
        self.settings = settings
        # Those of auth.tokens now; start() adds auth.tokens_file's.
        self._tokens = [(t.token.encode(), t.principal) for t in settings.tokens]
        self.jwt = JwtVerifier(settings.jwt) if jwt_enabled(settings.jwt) else None
        # On when anything is configured, even a tokens file that turns out empty or a
        # JWKS URL not fetched yet: then every request is refused, never let through.
        self.enabled = auth_enabled(settings)
        # The resource-server role (auth.jwt with an issuer): set by the app, which knows
        # the servers' paths (proxy/downstream/resource.py).
        self.resource: ResourceServer | None = None
        per_minute = settings.per_principal.resumes_per_minute
        self._resumes = RateLimiter(per_minute) if per_minute else None

    async def start(self, app: web.Application | None = None) -> None:
        """Load what authentication needs before the first request: the tokens file, the
        JWKS file or a first fetch of the JWKS URL (which may fail: see jwks.py)."""
        if not self.enabled:
            return
        try:
            self._tokens = [(token.encode(), name) for token, name in load_tokens(self.settings)]
            if self.jwt is not None:
                await self.jwt.start()
        except ConfigError as exc:
            log.error("auth_config_error", error=str(exc))
            raise
        log.info("auth_enabled", static_tokens=len(self._tokens), **describe_sources(self.settings))

    async def close(self, app: web.Application | None = None) -> None:
        """Release what :meth:`start` took (the JWKS refresh task and its HTTP client)."""
        if self.jwt is not None:
            await self.jwt.close()

    def principal_for(self, presented: str) -> str | None:
        """The principal a static bearer token names, or None."""
        given = presented.encode()
        principal = None
        for token, name in self._tokens:  # every token is compared: no early exit
            if hmac.compare_digest(token, given):
                principal = name
        return principal

    async def authenticate(
        self, presented: str, path: str = "/"
    ) -> tuple[str, frozenset[str] | None]:
        """The principal of a bearer credential and the scopes it grants (None for a
        static token): a static token, else a JWT good at ``path``; :class:`InvalidToken`
        when it is neither."""
        principal = self.principal_for(presented)
        if principal is not None:
            return principal, None
        if self.jwt is None:
            raise InvalidToken("unknown_token")
        # As a resource server, the audiences of the path (auth.jwt.audience among them).
        audiences = self.resource.accepted_audiences(path) if self.resource else None
        return await self.jwt.verify(presented, audiences)

    def resume_allowed(self, principal: str | None, now: float) -> float | None:
        """None when ``principal`` may resume or poll now (``auth.per_principal.
        resumes_per_minute``), else the seconds until it may (``Retry-After``)."""
        if principal is None or self._resumes is None:
            return None
        return self._resumes.take(principal, now)

    @web.middleware
    async def middleware(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        path = request.path
        if not self.enabled or path in _OPEN or request.method == "OPTIONS" or is_metadata(path):
            request[PRINCIPAL] = request[SCOPES] = None  # none (read without a KeyError)
            return await handler(request)
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        presented = presented.strip()
        why = "missing"
        if scheme.lower() == "bearer" and presented:
            try:
                principal, scopes = await self.authenticate(presented, path)
            except InvalidToken as exc:
                why = exc.why
            else:
                missing = self._missing_scopes(path, scopes)
                if missing:
                    return self._insufficient_scope(path, principal, missing)
                request[PRINCIPAL] = principal
                request[SCOPES] = scopes  # None: a static token (no scope rule limits it)
                request[_AUTHENTICATOR] = self
                return await handler(request)
        error = Unauthorized("Unauthorized: a valid bearer token is required")
        log.info("request_refused", path=path, status=401, reason=error.reason, why=why)
        return error_response(error, {"WWW-Authenticate": self._challenge(path, presented)})

    def _challenge(self, path: str, presented: str) -> str:
        """A 401's ``WWW-Authenticate`` (RFC 6750 §3): ``invalid_token`` when a credential
        was presented; as a resource server, also the scopes needed at ``path`` and where
        its metadata is (RFC 9728 §5.1)."""
        error = "invalid_token" if presented else None
        if self.resource is None:
            return CHALLENGE + (f', error="{error}"' if error else "")
        scope = self.resource.scopes_required(path)
        return self.resource.challenge(path, error=error, scope=scope)

    def _missing_scopes(self, path: str, scopes: frozenset[str] | None) -> tuple[str, ...]:
        """The scopes required at ``path`` that a JWT's ``scopes`` lack (a static token,
        ``scopes`` None, is held to none)."""
        if self.resource is None or scopes is None:
            return ()
        return tuple(s for s in self.resource.scopes_required(path) if s not in scopes)

    def _insufficient_scope(
        self, path: str, principal: str, missing: tuple[str, ...]
    ) -> web.Response:
        """403 ``insufficient_scope`` naming every scope ``path`` requires (2026-07-28
        authorization §Runtime Insufficient Scope Errors: all of them in one challenge)."""
        assert self.resource is not None
        needed = self.resource.scopes_required(path)
        error = InsufficientScope(
            f"Forbidden: this token lacks the scope {' '.join(missing)} "
            f"(needed here: {' '.join(needed)})"
        )
        log.info("request_refused", path=path, status=403, reason=error.reason, principal=principal)
        challenge = self.resource.challenge(path, error="insufficient_scope", scope=needed)
        return error_response(error, {"WWW-Authenticate": challenge})
