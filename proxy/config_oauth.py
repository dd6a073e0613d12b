"""An HTTP upstream's ``oauth:`` section (docs/upstreams.md §OAuth): credentials the proxy
obtains and refreshes itself for a server that requires OAuth (MCP 2025-06-18 onward,
basic/authorization), and the rules between its keys, checked by ``check`` and at start.

- ``client_credentials`` (RFC 6749 §4.4): the proxy is the client, with its own id and
  secret; tokens are asked for when needed and kept in memory.
- ``authorization_code``: a person signs in once with ``mcp-resume-proxy login NAME``
  (code + PKCE, RFC 7636); the refresh token it gets is kept in ``token_file`` and used
  from then on.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from proxy.config_rules import Bound, ConfigError, NonNegative, OneOf, interpolate

OAUTH_GRANTS = ("none", "client_credentials", "authorization_code")


@dataclass(frozen=True)
class UpstreamOAuthConfig:
    # none: only the static headers go upstream. client_credentials: the proxy gets its
    # own tokens as client_id (RFC 6749 §4.4). authorization_code: a refresh token kept
    # in token_file, obtained once by `mcp-resume-proxy login NAME` (code + PKCE).
    grant: Annotated[str, OneOf(OAUTH_GRANTS)] = "none"
    # The authorization server's issuer; its metadata (RFC 8414, or OpenID Connect
    # Discovery) gives the endpoints. null: the first one the server's protected-resource
    # metadata names (RFC 9728, found from its 401 or its well-known URL).
    issuer: str | None = None
    # The token endpoint, for a server that publishes no metadata. null: discovered.
    token_endpoint: str | None = None
    # The proxy's client id at the authorization server. authorization_code: null
    # registers one at `login` (dynamic client registration, RFC 7591).
    client_id: str | None = None
    # Its secret ("${NAME}" reads it from the environment when the upstream starts;
    # never logged), sent with HTTP Basic (client_secret_basic).
    client_secret: str | None = None
    # Scopes asked for. Empty: the ones the server's 401 names, else its
    # protected-resource metadata's scopes_supported, else none.
    scopes: list[str] = field(default_factory=list)
    # The resource the tokens are for (RFC 8707), sent in every authorization and token
    # request. null: the upstream url (without its fragment).
    resource: str | None = None
    # authorization_code: where `login` stores the tokens and the proxy reads and refreshes
    # them (mode 0600, its folder 0700). null: $XDG_STATE_HOME (else ~/.local/state)
    # /mcp-resume-proxy/oauth/NAME.json.
    token_file: str | None = None
    # An access token is renewed this long before it expires (and once when the server
    # answers 401 to it).
    refresh_before_seconds: Annotated[float, NonNegative] = 60.0
    # `login`: the loopback port the browser is sent back to (redirect_uri
    # http://127.0.0.1:PORT/callback). 0: any free port (with a registered client only).
    redirect_port: Annotated[int, Bound(0, 65535)] = 0

    @property
    def enabled(self) -> bool:
        return self.grant != "none"

    def resolved_secret(self, where: str) -> str | None:
        """``client_secret`` with ``${NAME}`` read from the environment (ConfigError if
        unset without a default)."""
        if self.client_secret is None:
            return None
        return interpolate(self.client_secret, f"{where}.oauth.client_secret")


def check_oauth(oauth: UpstreamOAuthConfig, kind: str, where: str) -> None:
    """The rules between ``oauth`` keys and the upstream's transport."""
    if not oauth.enabled:
        return
    at = f"{where}.oauth"
    if kind != "streamable-http":
        raise ConfigError(f"{at}.grant: OAuth is for a Streamable HTTP url upstream, not {kind}")
    if oauth.grant == "client_credentials" and (not oauth.client_id or not oauth.client_secret):
        raise ConfigError(f"{at}: client_credentials needs client_id and client_secret")
    for key in ("issuer", "token_endpoint", "resource"):
        value = getattr(oauth, key)
        if value is not None and not value.lower().startswith(("http://", "https://")):
            raise ConfigError(f"{at}.{key}: expected an http(s):// URL")
    if oauth.redirect_port == 0 and oauth.client_id and oauth.grant == "authorization_code":
        raise ConfigError(
            f"{at}.redirect_port: a configured client_id has a fixed redirect URI: give its port"
        )


def default_token_file(server: str) -> Path:
    """``$XDG_STATE_HOME/mcp-resume-proxy/oauth/SERVER.json`` (XDG Base Directory: state
    that outlives a run but is not configuration); ``~/.local/state`` without it."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "mcp-resume-proxy" / "oauth" / f"{server}.json"
