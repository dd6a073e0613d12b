"""Finding an MCP server's authorization server, as an MCP client does (2025-06-18 …
2026-07-28 basic/authorization §Authorization Server Discovery), and the token endpoint's
answers.

1. The server's protected-resource metadata (RFC 9728): the URL in the ``resource_metadata``
   parameter of its 401's ``WWW-Authenticate``, else the well-known URL with the MCP
   endpoint's path inserted, else at the root (RFC 9728 §3.1).
2. Its ``authorization_servers[0]``'s metadata: RFC 8414 (path inserted), then OpenID
   Connect Discovery (path inserted, then appended), as 2025-11-25 §Authorization Server
   Metadata Discovery orders them.

Every answer is bounded in size; failures are :class:`DiscoveryError` with a short reason
(no body quoted: an error page might echo a credential).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from yarl import URL

from proxy.core.errors import ProxyError

MAX_METADATA_BYTES = 256 * 1024
TIMEOUT = aiohttp.ClientTimeout(total=30)
_PARAM = re.compile(r'([A-Za-z_][A-Za-z0-9_.-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))')


class DiscoveryError(ProxyError):
    """The server's or its authorization server's metadata cannot be had."""


def bearer_challenge(header: str | None) -> dict[str, str]:
    """The parameters of a ``WWW-Authenticate: Bearer …`` challenge (RFC 6750 §3), e.g.
    ``resource_metadata``, ``scope``, ``error``; {} when there is none."""
    if not header:
        return {}
    match = re.search(r"(?i)\bbearer\b", header)
    if match is None:
        return {}
    params: dict[str, str] = {}
    for m in _PARAM.finditer(header, match.end()):
        name = m.group(1).lower()
        value = m.group(2) if m.group(2) is not None else m.group(3)
        params.setdefault(name, re.sub(r"\\(.)", r"\1", value))
    return params


def canonical_resource(url: str) -> str:
    """The MCP server's canonical URI (RFC 8707 §2; 2025-06-18 §Canonical Server URI):
    lower-case scheme and host, no fragment, no trailing slash on a bare host."""
    u = URL(url).with_fragment(None)
    text = str(u.with_scheme(u.scheme.lower()).with_host((u.host or "").lower()))
    return text[:-1] if u.path == "/" and not u.query_string else text


def well_known(url: str, name: str) -> list[str]:
    """The well-known URLs for ``name`` of ``url``: the path inserted, then the root."""
    u = URL(url)
    root = u.with_path(f"/.well-known/{name}").with_query(None).with_fragment(None)
    path = u.path.rstrip("/")
    found = [str(root.with_path(f"/.well-known/{name}{path}"))] if path else []
    return [*found, str(root)]


def as_metadata_urls(issuer: str) -> list[str]:
    """Where an authorization server's metadata may be (2025-11-25 §Authorization Server
    Metadata Discovery)."""
    u = URL(issuer)
    path = u.path.rstrip("/")
    if not path:
        return well_known(issuer, "oauth-authorization-server") + well_known(
            issuer, "openid-configuration"
        )
    base = u.with_query(None).with_fragment(None)
    return [
        str(base.with_path(f"/.well-known/oauth-authorization-server{path}")),
        str(base.with_path(f"/.well-known/openid-configuration{path}")),
        str(base.with_path(f"{path}/.well-known/openid-configuration")),
    ]


async def get_json(http: aiohttp.ClientSession, url: str) -> dict[str, Any] | None:
    """A JSON object at ``url``; None on 4xx (not there); DiscoveryError otherwise."""
    try:
        async with http.get(url, timeout=TIMEOUT, allow_redirects=False) as resp:
            if 400 <= resp.status < 500:
                return None
            if resp.status != 200:
                raise DiscoveryError(f"{_shown(url)} answered HTTP {resp.status}")
            body = await resp.content.read(MAX_METADATA_BYTES + 1)
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise DiscoveryError(f"{_shown(url)} cannot be reached ({type(exc).__name__})") from None
    if len(body) > MAX_METADATA_BYTES:
        raise DiscoveryError(f"{_shown(url)}: metadata over {MAX_METADATA_BYTES} bytes")
    try:
        data = json.loads(body)
    except ValueError:
        raise DiscoveryError(f"{_shown(url)}: not JSON") from None
    if not isinstance(data, dict):
        raise DiscoveryError(f"{_shown(url)}: not a JSON object")
    return data


@dataclass(frozen=True)
class ResourceInfo:
    """What the MCP server says of itself: its PRM (RFC 9728) and its 401's challenge."""

    metadata: dict[str, Any]
    challenge: dict[str, str]

    @property
    def authorization_server(self) -> str | None:
        servers = self.metadata.get("authorization_servers")
        if isinstance(servers, list) and servers and isinstance(servers[0], str):
            return servers[0]
        return None

    def scopes(self) -> list[str]:
        """The scopes to ask for when none are configured: the challenge's, else
        ``scopes_supported`` (2025-11-25 §Scope Selection Strategy)."""
        if self.challenge.get("scope"):
            return self.challenge["scope"].split()
        supported = self.metadata.get("scopes_supported")
        if isinstance(supported, list):
            return [s for s in supported if isinstance(s, str)]
        return []


async def protected_resource(http: aiohttp.ClientSession, url: str) -> ResourceInfo:
    """Ask the MCP server at ``url`` (a POST without credentials) for its challenge, then
    read its protected-resource metadata."""
    probe = {"jsonrpc": "2.0", "id": "mcp-resume-proxy-login", "method": "ping"}
    headers = {"Accept": "application/json, text/event-stream"}
    try:
        async with http.post(url, json=probe, headers=headers, timeout=TIMEOUT) as resp:
            challenge = bearer_challenge(resp.headers.get("WWW-Authenticate"))
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise DiscoveryError(f"{_shown(url)} cannot be reached ({type(exc).__name__})") from None
    candidates = well_known(url, "oauth-protected-resource")
    if challenge.get("resource_metadata"):
        candidates.insert(0, challenge["resource_metadata"])
    for candidate in candidates:
        metadata = await get_json(http, candidate)
        if metadata is not None:
            return ResourceInfo(metadata, challenge)
    return ResourceInfo({}, challenge)


async def authorization_server(http: aiohttp.ClientSession, issuer: str) -> dict[str, Any]:
    """The metadata of the authorization server ``issuer`` (RFC 8414 §3.3: its ``issuer``
    must be the one asked for)."""
    for candidate in as_metadata_urls(issuer):
        metadata = await get_json(http, candidate)
        if metadata is None:
            continue
        if metadata.get("issuer") != issuer:  # identical, no normalization (RFC 8414 §3.3)
            raise DiscoveryError(f"{_shown(candidate)} names another issuer")
        return metadata
    raise DiscoveryError(f"no authorization server metadata found for {_shown(issuer)}")


def endpoint_of(metadata: dict[str, Any], name: str) -> str:
    value = metadata.get(name)
    if not isinstance(value, str) or not value.lower().startswith(("http://", "https://")):
        raise DiscoveryError(f"the authorization server's metadata has no {name}")
    return value


@dataclass(frozen=True)
class TokenAnswer:
    """A token endpoint's successful answer (RFC 6749 §5.1)."""

    access_token: str
    expires_at: float | None
    refresh_token: str | None
    scope: str | None


class TokenRefused(ProxyError):
    """The token endpoint refused (RFC 6749 §5.2): ``error`` is its code (invalid_grant, …)."""

    def __init__(self, error: str, status: int) -> None:
        super().__init__(f"the authorization server refused: {error} (HTTP {status})")
        self.error = error
        self.status = status


async def token_request(
    http: aiohttp.ClientSession,
    endpoint: str,
    form: dict[str, str],
    client_id: str,
    secret: str | None,
) -> TokenAnswer:
    """POST ``form`` to the token endpoint as ``client_id`` (HTTP Basic with ``secret``,
    or ``client_id`` in the form for a public client); TokenRefused or DiscoveryError."""
    headers = {"Accept": "application/json"}
    if secret is not None:
        headers["Authorization"] = aiohttp.BasicAuth(client_id, secret).encode()
    else:
        form = {**form, "client_id": client_id}
    try:
        async with http.post(endpoint, data=form, headers=headers, timeout=TIMEOUT) as resp:
            body = await resp.content.read(MAX_METADATA_BYTES + 1)
            status = resp.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise DiscoveryError(
            f"the token endpoint cannot be reached ({type(exc).__name__})"
        ) from None
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        raise DiscoveryError(f"the token endpoint answered HTTP {status} without JSON")
    if status != 200 or not isinstance(data.get("access_token"), str):
        error = data.get("error")
        raise TokenRefused(error if isinstance(error, str) else "no access_token", status)
    expires_in = data.get("expires_in")
    expires_at = time.time() + float(expires_in) if isinstance(expires_in, int | float) else None
    refresh = data.get("refresh_token")
    scope = data.get("scope")
    return TokenAnswer(
        data["access_token"],
        expires_at,
        refresh if isinstance(refresh, str) else None,
        scope if isinstance(scope, str) else None,
    )


def _shown(url: str) -> str:
    u = URL(url)
    return str(u.with_user(None).with_password(None).with_query(None).with_fragment(None))
