"""The ``mcpServers`` JSON of desktop hosts and other proxies, read as this proxy's
``servers`` (docs/upstreams.md §Several servers).

::

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "server-fs", "/data"], "env": {...}},
        "remote": {"url": "https://example.com/mcp", "headers": {...}, "type": "http"}}}

Each entry becomes ``servers.NAME``: ``command`` + ``args`` the stdio command, ``env`` and
``cwd`` as they are; ``url`` (or ``serverUrl``; ``httpUrl`` is Streamable HTTP) and
``headers`` with ``type`` / ``transport`` (``stdio``, ``sse``, ``http`` /
``streamable-http`` / ``streamableHttp``, ``ws`` / ``websocket``; none: by the URL).
An entry with ``"disabled": true`` is left out; keys that only concern a host
(``autoApprove``, ``description``, ``timeout`` ...) are ignored. Any other top-level key
of the file is this proxy's own (``listen``, ``auth``, ...), so one file can hold both.
"""

from __future__ import annotations

from typing import Any

from proxy.config_rules import ConfigError, describe

KEY = "mcpServers"

_TRANSPORTS = {
    "stdio": "stdio",
    "sse": "sse",
    "http": "streamable-http",
    "streamable-http": "streamable-http",
    "streamable_http": "streamable-http",
    "streamablehttp": "streamable-http",
    "ws": "websocket",
    "websocket": "websocket",
}
# What a host's entry may say that is not about how to reach the server.
_HOST_ONLY = frozenset(
    {
        "autoApprove",
        "alwaysAllow",
        "description",
        "disabled",
        "timeout",
        "name",
        "icon",
        "enabled",
        "trust",
        "includeTools",
        "excludeTools",
    }
)
_OWN = frozenset(
    {"command", "args", "env", "cwd", "url", "headers", "type", "transport"}
    | {"serverUrl", "httpUrl"}  # other hosts' names for url
)


def is_mcp_servers(data: Any) -> bool:
    return isinstance(data, dict) and KEY in data


def from_mcp_servers(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with ``mcpServers`` turned into ``servers`` (a ``ConfigError`` names the
    entry's key path, ``mcpServers.NAME.KEY``)."""
    entries = data[KEY]
    if not isinstance(entries, dict):
        raise ConfigError(f"{KEY}: expected a mapping of server names, got {describe(entries)}")
    if "servers" in data:
        raise ConfigError(f"servers: give either {KEY} or servers, not both")
    servers = {}
    for name, entry in entries.items():
        where = f"{KEY}.{name}"
        if not isinstance(entry, dict):
            raise ConfigError(f"{where}: expected a mapping, got {describe(entry)}")
        if entry.get("disabled") is True or entry.get("enabled") is False:
            continue
        unknown = sorted(set(entry) - _OWN - _HOST_ONLY)
        if unknown:
            raise ConfigError(
                f"{where}.{unknown[0]}: unknown key (known here: {', '.join(sorted(_OWN))})"
            )
        servers[str(name)] = _server(where, entry)
    if not servers:
        raise ConfigError(f"{KEY}: no server (every entry is disabled, or there is none)")
    rest = {k: v for k, v in data.items() if k != KEY}
    return {**rest, "servers": servers}


def _server(where: str, entry: dict[str, Any]) -> dict[str, Any]:
    server: dict[str, Any] = {}
    kind = entry.get("transport", entry.get("type"))
    if kind is not None:
        field = "transport" if "transport" in entry else "type"
        if not isinstance(kind, str) or kind.lower() not in _TRANSPORTS:
            raise ConfigError(
                f"{where}.{field}: expected one of {', '.join(sorted(_TRANSPORTS))}, "
                f"got {describe(kind)}"
            )
        server["transport"] = _TRANSPORTS[kind.lower()]
    if "command" in entry:
        command, args = entry["command"], entry.get("args", [])
        if not isinstance(command, str) or not command:
            raise ConfigError(f"{where}.command: expected a program name, got {describe(command)}")
        if not isinstance(args, list):
            raise ConfigError(f"{where}.args: expected a list, got {describe(args)}")
        server["command"] = [command, *args]
    elif "args" in entry:
        raise ConfigError(f"{where}.args: args without a command")
    urls = [key for key in ("url", "serverUrl", "httpUrl") if key in entry]
    if len(urls) > 1:
        raise ConfigError(f"{where}.{urls[1]}: give one of url, serverUrl, httpUrl")
    if urls:
        server["url"] = entry[urls[0]]
        if urls[0] == "httpUrl" and kind is None:
            server["transport"] = "streamable-http"
    for key in ("headers", "env", "cwd"):
        if key in entry:
            server[key] = entry[key]
    return server
