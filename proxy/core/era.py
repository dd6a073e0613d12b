"""Which era a POST speaks, and the checks a modern (2026-07-28) request must pass.

MCP 2026-07-28 is stateless: no ``initialize``, no session, every request carries its
protocol version and the client's capabilities in ``_meta``, and the HTTP headers mirror
the body (``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``) so that intermediaries
can route on them. Legacy clients (2024-11-05 … 2025-11-25) open with ``initialize`` and
then carry ``Mcp-Session-Id``. One endpoint serves both (``basic/versioning.mdx``, dual
era): :func:`is_modern` decides per POST, :func:`check_request` validates a modern one
with the spec's errors (``basic/transports/streamable-http.mdx`` §Server Validation).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.core import protocol
from proxy.core.errors import ProxyError

MODERN_VERSIONS = ("2026-07-28",)
LEGACY_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
SUPPORTED_VERSIONS = MODERN_VERSIONS + LEGACY_VERSIONS

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_LOG_LEVEL = "io.modelcontextprotocol/logLevel"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"

# The spec's codes, named once in core/protocol.py; importable from here as before.
HEADER_MISMATCH = protocol.HEADER_MISMATCH
MISSING_CAPABILITY = protocol.MISSING_CAPABILITY
UNSUPPORTED_VERSION = protocol.UNSUPPORTED_VERSION
INVALID_PARAMS = protocol.INVALID_PARAMS
METHOD_NOT_FOUND = protocol.METHOD_NOT_FOUND

# Methods whose Mcp-Name header mirrors a body field.
_NAMED = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
_SENTINEL_HEAD, _SENTINEL_TAIL = "=?base64?", "?="


class ModernError(ProxyError):
    """A modern request refused with one of the spec's JSON-RPC errors (and ``data``)."""

    def __init__(
        self, code: int, message: str, *, http_status: int = 400, data: Any = None
    ) -> None:
        super().__init__(message, http_status=http_status, data=data)
        self.jsonrpc_code = code


def missing_capability(required: dict[str, Any], what: str) -> ModernError:
    return ModernError(
        MISSING_CAPABILITY,
        f"Missing required client capability: {what}",
        data={"requiredCapabilities": required},
    )


def tasks_capability_missing() -> ModernError:
    return missing_capability({"extensions": {TASKS_EXTENSION: {}}}, TASKS_EXTENSION)


def method_not_found(method: str) -> ModernError:
    return ModernError(METHOD_NOT_FOUND, f"Method not found: {method}", http_status=404)


def invalid_params(message: str) -> ModernError:
    return ModernError(INVALID_PARAMS, message)


def _meta_of(raw: Mapping[str, Any]) -> Any:
    params = raw.get("params")
    return params.get("_meta") if isinstance(params, dict) else None


def is_modern(
    raw: Mapping[str, Any], version_header: str | None, session_header: str | None
) -> bool:
    """Whether one POSTed message is a modern client's (the rest is legacy, as before).

    Modern: the body's ``_meta`` names a protocol version, or the header names a version
    that is not a legacy one while no session is named (a modern client with a version
    this proxy does not know gets ``UnsupportedProtocolVersion``, not ``missing session``).
    ``initialize`` is legacy (it is how a legacy client opens) unless it says it is
    modern, by ``_meta`` or by a 2026-07-28 header: then it is a method 2026-07-28 lacks.
    """
    meta = _meta_of(raw)
    if isinstance(meta, dict) and META_VERSION in meta:
        return True  # (an initialize like this one gets 404: 2026-07-28 has none)
    if version_header is None or session_header:
        return False
    version = version_header.strip()
    if raw.get("method") == "initialize":
        return version in MODERN_VERSIONS
    return version not in LEGACY_VERSIONS


def decode_header_value(value: str) -> str:
    """A mirrored header's value: plain, or the Base64 sentinel ``=?base64?…?=``."""
    if value.startswith(_SENTINEL_HEAD) and value.endswith(_SENTINEL_TAIL):
        encoded = value[len(_SENTINEL_HEAD) : len(value) - len(_SENTINEL_TAIL)]
        try:
            return base64.b64decode(encoded, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise ModernError(
                HEADER_MISMATCH, "Header mismatch: malformed Base64 value in a mirrored header"
            ) from None
    return value


@dataclass(frozen=True, slots=True)
class ModernRequest:
    """What a validated modern request tells the proxy about its client."""

    version: str
    capabilities: dict[str, Any]
    client_info: Any
    log_level: str | None
    progress_token: Any

    def declares(self, capability: str) -> bool:
        return isinstance(self.capabilities.get(capability), dict)

    @property
    def tasks(self) -> bool:
        """The client declared the Tasks extension on this request."""
        extensions = self.capabilities.get("extensions")
        return isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)


def check_request(raw: Mapping[str, Any], headers: Mapping[str, str]) -> ModernRequest:
    """Validate one modern request's ``_meta`` and mirrored headers; raise ``ModernError``.

    Order: the version first (a client on an unknown version learns which are served),
    then the headers against the body, then the rest of ``_meta``.
    """
    method = raw.get("method")
    params = raw.get("params")
    if params is not None and not isinstance(params, dict):
        raise invalid_params("Invalid params: params must be an object")
    meta = _meta_of(raw)
    if not isinstance(meta, dict):
        raise invalid_params("Invalid params: _meta with the request metadata is required")
    version = meta.get(META_VERSION)
    if not isinstance(version, str):
        raise invalid_params(f"Invalid params: _meta[{META_VERSION!r}] must be a string")
    header_version = headers.get("MCP-Protocol-Version")
    if header_version is None:
        raise ModernError(HEADER_MISMATCH, "Header mismatch: MCP-Protocol-Version is required")
    if header_version.strip() != version:  # a mismatch wins over an unknown version
        raise ModernError(
            HEADER_MISMATCH,
            f"Header mismatch: MCP-Protocol-Version {header_version!r} does not match "
            f"_meta protocolVersion {version!r}",
        )
    if version not in MODERN_VERSIONS:
        raise ModernError(
            UNSUPPORTED_VERSION,
            f"Unsupported protocol version: {version}",
            data={"supported": list(SUPPORTED_VERSIONS), "requested": version},
        )
    header_method = headers.get(METHOD_HEADER)
    if header_method is None:
        raise ModernError(HEADER_MISMATCH, f"Header mismatch: {METHOD_HEADER} is required")
    if header_method != method:
        raise ModernError(
            HEADER_MISMATCH,
            f"Header mismatch: {METHOD_HEADER} {header_method!r} does not match method {method!r}",
        )
    field = _NAMED.get(method) if isinstance(method, str) else None
    if field is not None:
        body_value = params.get(field) if isinstance(params, dict) else None
        header_name = headers.get(NAME_HEADER)
        if header_name is None:
            raise ModernError(HEADER_MISMATCH, f"Header mismatch: {NAME_HEADER} is required")
        if isinstance(body_value, str) and decode_header_value(header_name) != body_value:
            raise ModernError(
                HEADER_MISMATCH,
                f"Header mismatch: {NAME_HEADER} does not match the body's {field}",
            )
    capabilities = meta.get(META_CAPABILITIES)
    if not isinstance(capabilities, dict):
        raise invalid_params(f"Invalid params: _meta[{META_CAPABILITIES!r}] must be an object")
    level = meta.get(META_LOG_LEVEL)
    return ModernRequest(
        version=version,
        capabilities=capabilities,
        client_info=meta.get(META_CLIENT_INFO),
        log_level=level if isinstance(level, str) else None,
        progress_token=meta.get("progressToken"),
    )


# Params only the proxy reads: MRTR's, and the 2025-11-25 task hint, which 2026-07-28
# ignores (a legacy server that has tasks must not make one of a modern call).
_PROXY_PARAMS = frozenset({"inputResponses", "requestState", "task"})


def upstream_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A modern request's params for a legacy server: without the modern ``_meta`` keys
    and the fields only the proxy reads."""
    out = {k: v for k, v in params.items() if k not in _PROXY_PARAMS}
    meta = out.get("_meta")
    if isinstance(meta, dict):
        kept = {k: v for k, v in meta.items() if not k.startswith("io.modelcontextprotocol/")}
        if kept:
            out["_meta"] = kept
        else:
            del out["_meta"]
    return out


def header_params(schema: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    """The ``x-mcp-header`` annotations of a tool's ``inputSchema``: (property path, name),
    reached through ``properties`` only (streamable-http.mdx §Custom Headers)."""
    found: list[tuple[tuple[str, ...], str]] = []
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict):
        return found
    for name, prop in properties.items():
        if not isinstance(prop, dict):
            continue
        header = prop.get("x-mcp-header")
        if isinstance(header, str) and header:
            found.append(((*path, name), header))
        found += header_params(prop, (*path, name))
    return found


def check_param_headers(
    annotated: list[tuple[tuple[str, ...], str]], arguments: Any, headers: Mapping[str, str]
) -> None:
    """Each ``Mcp-Param-{Name}`` header against the argument it mirrors (``annotated``: the
    tool's :func:`header_params`); -32020 if a value is present without its header, a
    header has no value, or the two differ."""
    for path, name in annotated:
        value: Any = arguments
        for part in path:
            value = value.get(part) if isinstance(value, dict) else None
        header_name = f"Mcp-Param-{name}"
        header = headers.get(header_name)
        if value is None:
            if header is not None:
                raise ModernError(
                    HEADER_MISMATCH, f"Header mismatch: {header_name} names no argument in the body"
                )
            continue
        if header is None:
            raise ModernError(HEADER_MISMATCH, f"Header mismatch: {header_name} is required")
        text = decode_header_value(header)
        if isinstance(value, bool):
            same = text == ("true" if value else "false")
        elif isinstance(value, int):
            try:
                same = float(text) == value
            except ValueError:
                same = False
        elif isinstance(value, str):
            same = text == value
        else:
            continue  # not a primitive the spec allows: nothing to compare
        if not same:
            raise ModernError(
                HEADER_MISMATCH, f"Header mismatch: {header_name} does not match the argument"
            )


# Log levels in order (RFC 5424 as MCP uses them), for the per-request logLevel.
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def log_wanted(request_level: str | None, message_level: Any) -> bool:
    """Whether a ``notifications/message`` goes to a request: only when it asked for logs
    (``_meta`` logLevel) and at or above that level."""
    if request_level is None:
        return False
    try:
        return LOG_LEVELS.index(str(message_level)) >= LOG_LEVELS.index(request_level)
    except ValueError:
        return True
