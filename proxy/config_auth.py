"""The ``auth:`` section (docs/auth.md): its schema, and its rules beyond types and
bounds, checked by ``mcp-resume-proxy check`` and at start; every error names its key
path.

- Static tokens (``auth.tokens`` and the file ``auth.tokens_file``): at least 16
  characters each, a non-empty principal, no token twice across both lists.
- JWT (``auth.jwt``): one key source (a JWKS file, read and checked here, or an http(s)
  URL), asymmetric algorithms only (never ``none``, never ``HS*``: with a public key as
  the HMAC secret anyone could sign), a principal claim.
- Per-principal limits need authentication on: without principals they would limit
  nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from proxy.config_file import Unreadable, parse_yaml, read_bounded
from proxy.config_rules import (
    ConfigError,
    NonNegative,
    Positive,
    Problems,
    convert,
    interpolated,
    shown_url,
)
from proxy.jwks_keys import (
    ASYMMETRIC_ALGORITHMS,
    JwksError,
    KeySet,
    loggable_url,
    read_jwks_file,
)

MIN_TOKEN_CHARS = 16


@dataclass(frozen=True)
class AuthToken:
    # The bearer token ("${NAME}" reads it from the environment; never logged) ...
    token: str = ""
    # ... and who presents it: sessions, streams and tasks are bound to this name.
    principal: str = ""


@dataclass(frozen=True)
class JwtConfig:
    """Bearer JWTs, verified with PyJWT against the keys of a JWKS (docs/auth.md)."""

    # The signing keys: a JWKS file (read at start), or a URL (fetched at start, again
    # every jwks_refresh_seconds, and on a token with an unknown key id at most every
    # 30 s). Setting either turns JWT auth on.
    jwks_file: str | None = None
    jwks_url: str | None = None
    jwks_refresh_seconds: Annotated[float, Positive] = 300.0
    # When set, a token's iss must match (exp is always required); with issuer set the
    # proxy is an OAuth resource server (auth.resource): see docs/auth.md.
    issuer: str | None = None
    # When set, a token whose aud names it is accepted. With issuer set, so is a token
    # whose aud names the canonical URI of the endpoint asked (auth.resource); without
    # issuer, aud is checked only when this is set.
    audience: str | None = None
    algorithms: list[str] = field(default_factory=lambda: ["RS256", "ES256"])
    # The claim that names the principal.
    principal_claim: str = "sub"
    # Clock skew allowed on exp and nbf.
    leeway_seconds: Annotated[float, NonNegative] = 30.0
    # Scopes every JWT must grant (its scope or scp claim), at every path; one that
    # lacks any gets 403 insufficient_scope. A server's required_scopes add to these.
    # Static tokens carry no scopes and are not held to them.
    required_scopes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ResourceConfig:
    """The MCP authorization spec's resource-server role (RFC 9728 metadata, audience =
    the canonical URI of the endpoint asked), on when auth.jwt has a JWKS and an issuer
    (docs/auth.md)."""

    # The URL clients reach this proxy at, scheme://host[:port] without a path (behind a
    # reverse proxy or a TLS terminator: its public address). Canonical resource URIs are
    # this plus an endpoint's path; the Host header is never used. null: http://
    # listen.host:PORT, allowed only when listen.host is loopback.
    public_url: str | None = None
    # Named in the metadata documents (at least one). Empty: [auth.jwt.issuer].
    authorization_servers: list[str] = field(default_factory=list)
    # Scopes named in the metadata's scopes_supported, beside every required scope.
    scopes_supported: list[str] = field(default_factory=list)
    # More audiences accepted beside the canonical URIs and auth.jwt.audience (e.g. the
    # client id an authorization server puts in aud).
    audiences: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PrincipalLimits:
    """Limits per principal (with auth on): one client cannot take every slot."""

    # Live sessions (legacy /mcp and /ws, every upstream) one principal may hold; past
    # it a new initialize gets 503 (too_many_sessions). null: only sessions.max_sessions.
    max_sessions: Annotated[int | None, Positive] = None
    # Resumes and polls (GET with Last-Event-ID, streams/resume, tasks/get) one
    # principal may make per minute, with bursts up to this many; past it 429
    # (rate_limited) with Retry-After. null: no limit.
    resumes_per_minute: Annotated[int | None, Positive] = None


@dataclass(frozen=True)
class AuthConfig:
    """Inbound authentication (docs/auth.md). No tokens, no tokens_file and no JWKS: off."""

    # Every route but /healthz then needs "Authorization: Bearer TOKEN" (else 401).
    tokens: list[AuthToken] = field(default_factory=list)
    # More tokens, from a YAML file of the same shape as tokens (a list of {token,
    # principal}), read at start: keeps them out of the main config file.
    tokens_file: str | None = None
    jwt: JwtConfig = field(default_factory=JwtConfig)
    resource: ResourceConfig = field(default_factory=ResourceConfig)
    per_principal: PrincipalLimits = field(default_factory=PrincipalLimits)
    # The principals who may read what spans everyone (/status, /status.json, /metrics);
    # others get 403. Empty: every authenticated principal may.
    operators: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _FileToken:
    """One entry of ``auth.tokens_file`` (the shape of ``auth.tokens``' entries)."""

    token: str = ""
    principal: str = ""


def check_auth(auth: AuthConfig) -> None:
    """Every rule of the ``auth:`` section; ``ConfigError`` names every broken one."""
    problems = Problems()
    for rule in (load_tokens, lambda a: _check_jwt(a.jwt), _check_principals):
        with problems.collecting():
            rule(auth)
    problems.raise_any()


def _check_principals(auth: AuthConfig) -> None:
    limits = auth.per_principal
    if (limits.max_sessions or limits.resumes_per_minute) and not auth_enabled(auth):
        raise ConfigError(
            "auth.per_principal: limits per principal need authentication on "
            "(auth.tokens, auth.tokens_file or auth.jwt.jwks_file / jwks_url)"
        )
    if auth.operators and not auth_enabled(auth):
        raise ConfigError(
            "auth.operators: operators are principals: they need authentication on "
            "(auth.tokens, auth.tokens_file or auth.jwt.jwks_file / jwks_url)"
        )
    for i, name in enumerate(auth.operators):
        if not name:
            raise ConfigError(f"auth.operators[{i}]: name a principal")


def auth_enabled(auth: AuthConfig) -> bool:
    """Whether requests need a bearer credential: any token source or a JWKS is set."""
    return bool(auth.tokens or auth.tokens_file or jwt_enabled(auth.jwt))


def jwt_enabled(settings: JwtConfig) -> bool:
    return bool(settings.jwks_file or settings.jwks_url)


def load_tokens(auth: AuthConfig) -> list[tuple[str, str]]:
    """Every static ``(token, principal)``: ``auth.tokens`` then those of
    ``auth.tokens_file`` (read now, ``${NAME}`` interpolated), checked."""
    entries = [
        (f"auth.tokens[{i}]", entry.token, entry.principal) for i, entry in enumerate(auth.tokens)
    ]
    if auth.tokens_file:
        entries += [
            (f"auth.tokens_file[{i}]", entry.token, entry.principal)
            for i, entry in enumerate(_read_tokens_file(auth.tokens_file))
        ]
    first_seen: dict[str, str] = {}
    problems = Problems()
    for where, token, principal in entries:
        if len(token) < MIN_TOKEN_CHARS:
            problems.error(f"{where}.token: use at least {MIN_TOKEN_CHARS} characters")
        if not principal:
            problems.error(f"{where}.principal: name who presents this token")
        if token in first_seen:
            problems.error(f"{where}.token: a token is listed twice (also {first_seen[token]})")
        first_seen.setdefault(token, where)
    problems.raise_any()
    return [(token, principal) for _, token, principal in entries]


def _read_tokens_file(path: str) -> list[_FileToken]:
    try:
        text = read_bounded(path)
    except Unreadable as exc:
        raise ConfigError(f"auth.tokens_file: cannot read {path}: {exc}") from None
    try:
        data = parse_yaml(text)  # its errors say where and what, never the line: a token
    except Unreadable as exc:
        raise ConfigError(f"auth.tokens_file: {path} is {exc}") from None
    if data is None:
        return []
    entries: list[_FileToken] = convert(
        "auth.tokens_file", list[_FileToken], interpolated(data, "auth.tokens_file")
    )
    return entries


def _check_jwt(settings: JwtConfig) -> None:
    if settings.jwks_file and settings.jwks_url:
        raise ConfigError("auth.jwt: give jwks_file or jwks_url, not both")
    if not jwt_enabled(settings):
        for key in ("issuer", "audience"):
            if getattr(settings, key) is not None:
                raise ConfigError(f"auth.jwt.{key}: set auth.jwt.jwks_file or jwks_url too")
        return
    if not settings.algorithms:
        raise ConfigError("auth.jwt.algorithms: name at least one algorithm")
    for i, name in enumerate(settings.algorithms):
        if name not in ASYMMETRIC_ALGORITHMS:
            raise ConfigError(
                f"auth.jwt.algorithms[{i}]: {name!r} is not allowed; only asymmetric "
                f"algorithms verify against a JWKS ({', '.join(ASYMMETRIC_ALGORITHMS)})"
            )
    if not settings.principal_claim:
        raise ConfigError("auth.jwt.principal_claim: name the claim that names the principal")
    if settings.jwks_url is not None:
        scheme, sep, _ = settings.jwks_url.partition("://")
        if scheme.lower() not in ("http", "https") or not sep:
            raise ConfigError(
                f"auth.jwt.jwks_url: expected an http(s):// URL, got "
                f"{shown_url(settings.jwks_url)!r}"
            )
    if settings.jwks_file:
        load_jwks_file(settings)


def load_jwks_file(settings: JwtConfig) -> KeySet:
    """The keys of ``auth.jwt.jwks_file``, read now; ``ConfigError`` if it cannot serve."""
    assert settings.jwks_file
    try:
        return read_jwks_file(settings.jwks_file, settings.algorithms)
    except JwksError as exc:
        raise ConfigError(f"auth.jwt.jwks_file: {exc}") from None


def describe_sources(auth: AuthConfig) -> dict[str, Any]:
    """What authenticates requests, for the start log (no secret: counts and paths)."""
    settings = auth.jwt
    return {
        "tokens": len(auth.tokens),
        "tokens_file": auth.tokens_file,
        "jwks": settings.jwks_file or (settings.jwks_url and loggable_url(settings.jwks_url)),
    }
