"""The Streamable HTTP header rules, as pure functions (2025-03-26 … 2025-11-25 transports).

Each check returns nothing or raises the :mod:`proxy.core.errors` error whose HTTP status
the spec asks for; the aiohttp layer only reads headers and calls these.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from urllib.parse import urlsplit

from proxy.core.errors import (
    BadRequest,
    ForbiddenOrigin,
    MisdirectedHost,
    NotAcceptable,
    UnsupportedMediaType,
)

SUPPORTED_PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
"""Revisions served to clients. 2026-07-28 (stateless) is a later façade (DESIGN.md D4)."""

DEFAULT_PROTOCOL_VERSION = "2025-03-26"
"""2025-06-18 §Protocol Version Header: assume this when the header is absent."""

LOCAL_HOSTNAMES = ("localhost", "127.0.0.1", "::1")


@functools.lru_cache(maxsize=256)  # per request, the same few Accept headers (bounded)
def _media_types(accept: str | None) -> frozenset[str]:
    if not accept:
        return frozenset()
    return frozenset(part.split(";", 1)[0].strip().lower() for part in accept.split(","))


def _accepts(types: frozenset[str], wanted: str) -> bool:
    major = wanted.split("/", 1)[0]
    return wanted in types or f"{major}/*" in types or "*/*" in types


def check_post_accept(accept: str | None) -> None:
    """POST: the client MUST accept both ``application/json`` and ``text/event-stream``."""
    types = _media_types(accept)
    if not (_accepts(types, "application/json") and _accepts(types, "text/event-stream")):
        raise NotAcceptable(
            "Not Acceptable: Accept must include application/json and text/event-stream"
        )


def check_get_accept(accept: str | None) -> None:
    """GET: the client MUST accept ``text/event-stream``."""
    if not _accepts(_media_types(accept), "text/event-stream"):
        raise NotAcceptable("Not Acceptable: Accept must include text/event-stream")


def check_content_type(content_type: str | None) -> None:
    """A POST body is JSON; an absent Content-Type is tolerated."""
    if not content_type:
        return
    media = content_type.split(";", 1)[0].strip().lower()
    if media != "application/json" and not media.endswith("+json"):
        raise UnsupportedMediaType("Unsupported Media Type: Content-Type must be application/json")


def check_protocol_version(header: str | None) -> str:
    """2025-06-18: an invalid or unsupported ``MCP-Protocol-Version`` gets 400."""
    if header is None:
        return DEFAULT_PROTOCOL_VERSION
    version = header.strip()
    if version not in SUPPORTED_PROTOCOL_VERSIONS:
        raise BadRequest(
            f"Bad Request: unsupported MCP-Protocol-Version {version!r} "
            f"(supported: {', '.join(SUPPORTED_PROTOCOL_VERSIONS)})",
            reason="unsupported_protocol_version",
        )
    return version


def host_name(host: str) -> str:
    """The name part of a ``Host`` header or URL authority, lower case, without port."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end != -1 else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def check_host(host: str | None, allowed: Iterable[str]) -> None:
    """DNS-rebinding guard: a ``Host`` we do not serve gets 421 Misdirected Request."""
    if not _host_served(host, tuple(allowed)):
        raise MisdirectedHost(f"Misdirected Request: Host {host!r} is not served here")


@functools.lru_cache(maxsize=256)  # per request, the same few Host headers (bounded)
def _host_served(host: str | None, allowed: tuple[str, ...]) -> bool:
    if "*" in allowed:
        return True
    return host is not None and host_name(host) in {host_name(a) for a in allowed}


def check_origin(origin: str | None, allowed: Iterable[str]) -> None:
    """2025-11-25 §Security: a present, invalid ``Origin`` MUST get 403 Forbidden.

    ``allowed`` holds full origins (``https://app.example``), bare host names (any scheme
    and port), or ``*``.
    """
    if origin is None:
        return
    allowed = list(allowed)
    if "*" in allowed:
        return
    lowered = origin.strip().lower()
    if lowered in {a.lower() for a in allowed}:
        return
    try:
        name = urlsplit(lowered).hostname
    except ValueError:
        name = None
    if name is not None and name in {host_name(a) for a in allowed if "://" not in a}:
        return
    raise ForbiddenOrigin(f"Forbidden: Origin {origin!r} is not allowed")
