"""The proxy as an OAuth resource server (MCP authorization, 2025-06-18 onward; RFC 9728,
RFC 8707, RFC 6750 §3): which resource each path is, what its protected-resource metadata
says, which audiences and scopes a token needs there, and the ``WWW-Authenticate``
challenge of a refusal. Pure: the base URL and the servers' paths are given.

- Each server is one protected resource with its canonical URIs: ``BASE/servers/NAME/mcp``
  (and ``BASE/mcp`` for the only server). Its metadata is served path-inserted
  (``/.well-known/oauth-protected-resource/servers/NAME/mcp``); its WebSocket path is the
  same resource and points at the same document.
- The root document (``/.well-known/oauth-protected-resource``) names ``BASE`` itself: the
  whole proxy. A token for ``BASE`` is good at every server; one for a server's URI only
  there (2026-07-28 authorization §Token Handling: "issued specifically for them").
- URIs compare with the scheme and host in lower case and without a trailing ``/``
  (2026-07-28 §Canonical Server URI: SHOULD accept either case, SHOULD use no slash).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

WELL_KNOWN = "/.well-known/oauth-protected-resource"


def is_metadata(path: str) -> bool:
    """``path`` is a protected-resource metadata document's (open to anyone)."""
    return path == WELL_KNOWN or path.startswith(WELL_KNOWN + "/")


def canonical(uri: str) -> str:
    """``uri`` compared as a resource: scheme and host lower case, no trailing ``/``, no
    fragment. A string that is no absolute URI (an audience like ``my-api``) is kept."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return uri
    if not parts.scheme or not parts.netloc:
        return uri
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, parts.query, ""))


def audience_accepted(aud: object, accepted: frozenset[str]) -> bool:
    """A JWT's ``aud`` (a string or a list of strings, RFC 7519 §4.1.3) names one of
    ``accepted`` (already :func:`canonical`)."""
    values = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    return any(isinstance(v, str) and canonical(v) in accepted for v in values)


def _unique(scopes: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(s for s in scopes if s))


@dataclass(frozen=True)
class ProtectedServer:
    """One server as a protected resource: its MCP paths (the first is its canonical one,
    whose metadata the others point at), its other paths (``/ws``), its required scopes,
    and more scopes its metadata names (those a per-tool policy knows)."""

    mcp_paths: tuple[str, ...]
    other_paths: tuple[str, ...] = ()
    required_scopes: tuple[str, ...] = ()
    advertised_scopes: tuple[str, ...] = ()


@dataclass
class ResourceServer:
    """What the resource-server role decides, for a given public ``base`` URL."""

    authorization_servers: tuple[str, ...]
    servers: dict[str, ProtectedServer]
    scopes_supported: tuple[str, ...] = ()
    required_scopes: tuple[str, ...] = ()  # everywhere
    audiences: tuple[str, ...] = ()  # configured, accepted everywhere
    base: str | None = None  # scheme://host[:port]; None until known (bound port)
    _by_path: dict[str, str] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        for name, server in self.servers.items():
            for path in (*server.mcp_paths, *server.other_paths):
                self._by_path[path] = name

    def server_at(self, path: str) -> str | None:
        """The name of the server ``path`` reaches (None: no server's path)."""
        return self._by_path.get(path)

    def _base(self) -> str:
        assert self.base is not None, "the base URL is known once the proxy listens"
        return canonical(self.base)

    def resource_uri(self, path: str) -> str:
        """The canonical URI of the resource at ``path`` (the base for a path that is
        not a server's)."""
        return self._base() + (path if path in self._by_path else "")

    def metadata_url(self, path: str) -> str:
        """The metadata document a refusal at ``path`` names (``resource_metadata``): the
        server's canonical MCP path's (its own for each MCP path), else the root one."""
        name = self.server_at(path)
        if name is None:
            return self._base() + WELL_KNOWN
        server = self.servers[name]
        own = path if path in server.mcp_paths else server.mcp_paths[0]
        return self._base() + WELL_KNOWN + own

    def accepted_audiences(self, path: str) -> frozenset[str]:
        """The ``aud`` values a token is good for at ``path``: the server's canonical URIs
        (every server's, at a path that is no server's: ``/readyz``, ``/status``), the
        base, the configured ones."""
        name = self.server_at(path)
        chosen = [self.servers[name]] if name is not None else list(self.servers.values())
        base = self._base()
        found = {base, *(canonical(a) for a in self.audiences)}
        found.update(base + p for server in chosen for p in server.mcp_paths)
        return frozenset(found)

    def scopes_required(self, path: str) -> tuple[str, ...]:
        """The scopes a JWT must grant at ``path``."""
        name = self.server_at(path)
        extra = self.servers[name].required_scopes if name is not None else ()
        return _unique((*self.required_scopes, *extra))

    def metadata(self, path: str) -> dict[str, object] | None:
        """The RFC 9728 document at ``path`` (``WELL_KNOWN`` + a server's MCP path, or
        ``WELL_KNOWN`` alone), or None when there is none there."""
        if path == WELL_KNOWN:
            resource = self._base()
            scopes = _unique(
                (
                    *self.scopes_supported,
                    *self.required_scopes,
                    *(
                        s
                        for server in self.servers.values()
                        for s in (*server.required_scopes, *server.advertised_scopes)
                    ),
                )
            )
        else:
            endpoint = path.removeprefix(WELL_KNOWN)
            name = self.server_at(endpoint) if path.startswith(WELL_KNOWN + "/") else None
            if name is None or endpoint not in self.servers[name].mcp_paths:
                return None
            resource = self._base() + endpoint
            advertised = self.servers[name].advertised_scopes
            scopes = _unique((*self.scopes_supported, *self.scopes_required(endpoint), *advertised))
        document: dict[str, object] = {
            "resource": resource,
            "authorization_servers": list(self.authorization_servers),
            "bearer_methods_supported": ["header"],
        }
        if scopes:
            document["scopes_supported"] = list(scopes)
        return document

    def challenge(self, path: str, *, error: str | None = None, scope: Iterable[str] = ()) -> str:
        """The ``WWW-Authenticate`` value of a refusal at ``path`` (RFC 6750 §3, RFC 9728
        §5.1): ``error`` (``invalid_token``, ``insufficient_scope``) when there is one,
        the ``scope`` needed when there is one, and where the metadata is."""
        parts = ['Bearer realm="mcp-resume-proxy"']
        if error is not None:
            parts.append(f'error="{error}"')
        needed = " ".join(scope)
        if needed:
            parts.append(f'scope="{needed}"')
        parts.append(f'resource_metadata="{self.metadata_url(path)}"')
        return ", ".join(parts)
