"""The rules of the resource-server role (``auth.resource``, ``auth.jwt.required_scopes``,
``servers.NAME.required_scopes``) that span sections: checked by ``mcp-resume-proxy check``
and at start (docs/auth.md).

- The role is on when ``auth.jwt`` has a JWKS and an ``issuer``.
- Canonical resource URIs need a public base URL: ``auth.resource.public_url``, or, only
  when ``listen.host`` is loopback, ``http://listen.host:PORT`` (never the ``Host``
  header, which a client chooses).
- Scopes come from JWTs: required scopes need the role on; a scope is an RFC 6749 §3.3
  scope-token (so it can be quoted in a challenge as it is).
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from proxy.config_auth import AuthConfig, jwt_enabled
from proxy.config_rules import ConfigError, Problems, shown_url

_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # RFC 6749 §3.3


def resource_server_on(auth: AuthConfig) -> bool:
    """Whether the proxy serves protected-resource metadata and checks audiences as a
    resource server: a JWKS and an issuer."""
    return jwt_enabled(auth.jwt) and auth.jwt.issuer is not None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_resource_server(
    auth: AuthConfig, listen_host: str, server_scopes: dict[str, list[str]]
) -> None:
    """Every rule above (``server_scopes``: each server's ``required_scopes`` by its key
    path); ``ConfigError`` names every broken one."""
    problems = Problems()
    scope_lists = {"auth.jwt.required_scopes": auth.jwt.required_scopes}
    scope_lists["auth.resource.scopes_supported"] = auth.resource.scopes_supported
    scope_lists.update({f"{where}.required_scopes": s for where, s in server_scopes.items()})
    for where, scopes in scope_lists.items():
        for i, scope in enumerate(scopes):
            if not _SCOPE_TOKEN.fullmatch(scope):
                problems.error(f"{where}[{i}]: not a scope (RFC 6749 §3.3): {scope!r}")
        if scopes and where.endswith("required_scopes") and not resource_server_on(auth):
            problems.error(
                f"{where}: scopes come from JWTs of the resource-server role: set "
                f"auth.jwt.issuer and auth.jwt.jwks_file or jwks_url"
            )
    resource = auth.resource
    for key in ("public_url", "authorization_servers", "scopes_supported", "audiences"):
        if getattr(resource, key) and not resource_server_on(auth):
            problems.error(
                f"auth.resource.{key}: the resource-server role needs auth.jwt.issuer "
                f"and auth.jwt.jwks_file or jwks_url"
            )
    for i, url in enumerate(resource.authorization_servers):
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            problems.error(
                f"auth.resource.authorization_servers[{i}]: expected an http(s):// URL, "
                f"got {shown_url(url)!r}"
            )
    with problems.collecting():
        _check_public_url(auth, listen_host)
    problems.raise_any()


def _check_public_url(auth: AuthConfig, listen_host: str) -> None:
    url = auth.resource.public_url
    if url is None:
        if resource_server_on(auth) and not is_loopback(listen_host):
            raise ConfigError(
                f"auth.resource.public_url: set it to the URL clients reach the proxy at "
                f"(https://host[:port]): with auth.jwt.issuer the proxy names its resource "
                f"URIs, and listen.host {listen_host} is not loopback"
            )
        return
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError:
        raise ConfigError("auth.resource.public_url: a malformed URL") from None
    if (
        parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or "@" in parts.netloc
    ):
        raise ConfigError(
            f"auth.resource.public_url: expected scheme://host[:port] (http or https, no "
            f"path, query or user info), got {shown_url(url)!r}"
        )


def public_base(auth: AuthConfig, host: str, port: int) -> str:
    """The base of canonical URIs: ``auth.resource.public_url``, else (loopback only,
    checked above) ``http://HOST:PORT``, ``listen.host`` and the port really bound."""
    if auth.resource.public_url:
        return auth.resource.public_url.rstrip("/")
    shown = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"http://{shown}:{port}"
