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
(``autoApprove``, ``alwaysAllow``, ``description``, ``timeout`` ...) are ignored. Any other
top-level key of the file is this proxy's own (``listen``, ``auth``, ...), so one file can
hold both.

Which tools clients see (docs/tools.md §Host keys), from the keys hosts use for it, exact
names each: ``includeTools`` (Gemini CLI) → ``tools.allow``; ``excludeTools`` (Gemini CLI)
and ``disabledTools`` (Roo Code) → ``tools.deny``; ``options.toolFilter`` (TBXark's
mcp-proxy: ``{"mode": "allow"|"block", "list": [...]}``) → either. This proxy's own
``tools``, ``prompts`` and ``resources`` sections may be given in an entry too.
"""

from __future__ import annotations

import re
from typing import Any

from proxy.config_rules import Problems, describe

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
    }
)
_OWN = frozenset(
    {"command", "args", "env", "cwd", "url", "headers", "type", "transport"}
    | {"serverUrl", "httpUrl"}  # other hosts' names for url
    | {"tools", "prompts", "resources"}  # this proxy's rules (docs/tools.md)
    | {"includeTools", "excludeTools", "disabledTools", "options"}  # hosts' names for them
)
# TBXark mcp-proxy's per-server options: what is not about tools concerns that proxy only.
_OPTIONS_IGNORED = frozenset({"panicIfInvalid", "logEnabled"})


def is_mcp_servers(data: Any) -> bool:
    return isinstance(data, dict) and KEY in data


def from_mcp_servers(data: dict[str, Any], problems: Problems) -> dict[str, Any]:
    """``data`` with ``mcpServers`` turned into ``servers``; each entry's problems go to
    ``problems`` (key paths ``mcpServers.NAME.KEY``), its wrong keys left out."""
    entries = data[KEY]
    rest = {k: v for k, v in data.items() if k != KEY}
    if not isinstance(entries, dict):
        problems.error(f"{KEY}: expected a mapping of server names, got {describe(entries)}")
        return rest
    if "servers" in data:
        problems.error(f"servers: give either {KEY} or servers, not both")
    servers = {}
    broken = False
    for name, entry in entries.items():
        where = f"{KEY}.{name}"
        if not isinstance(entry, dict):
            problems.error(f"{where}: expected a mapping, got {describe(entry)}")
            broken = True
            continue
        if entry.get("disabled") is True or entry.get("enabled") is False:
            continue
        unknown = sorted(set(entry) - _OWN - _HOST_ONLY)
        for key in unknown:
            problems.error(f"{where}.{key}: unknown key (known here: {', '.join(sorted(_OWN))})")
        servers[str(name)] = _server(where, entry, problems)
    if not servers and not broken:
        problems.error(f"{KEY}: no server (every entry is disabled, or there is none)")
    return {**rest, "servers": servers}


def file_key_path(message: str, entries: dict[str, Any]) -> str:
    """A problem's message with the schema's key paths (``servers.x.command[2]``) turned
    into the file's (``mcpServers.x.args[1]``), where it starts and in its text:
    ``command`` and ``args`` are one list here, ``url`` may be ``serverUrl`` or
    ``httpUrl``, ``transport`` may be ``type``."""
    path, sep, rest = message.partition(": ")
    if not sep:
        return message
    rest = _SCHEMA_PATH.sub(lambda m: _file_path(m.group(0), entries) or m.group(0), rest)
    return f"{_file_path(path, entries) or path}{sep}{rest}"


_SCHEMA_PATH = re.compile(r"\bservers\.[^\s,;:()]+")


def _file_path(path: str, entries: dict[str, Any]) -> str | None:
    """The file's name of the schema's key path ``servers.NAME...`` (None: not one)."""
    if not path.startswith("servers."):
        return None
    for name in sorted(entries, key=lambda n: -len(str(n))):  # "a.b" before "a"
        server, entry = f"servers.{name}", entries[name]
        if path != server and not path.startswith((f"{server}.", f"{server}[")):
            continue
        tail = path[len(server) :]
        entry = entry if isinstance(entry, dict) else {}
        if tail == ".command[0]":
            tail = ".command"
        elif tail.startswith(".command["):
            index = int(tail[len(".command[") :].partition("]")[0])
            tail = f".args[{index - 1}]{tail.partition(']')[2]}"
        elif tail == ".url":
            tail = "." + next((k for k in ("url", "serverUrl", "httpUrl") if k in entry), "url")
        elif tail == ".transport" and "transport" not in entry and "type" in entry:
            tail = ".type"
        return f"{KEY}.{name}{tail}"
    return None


def _server(where: str, entry: dict[str, Any], problems: Problems) -> dict[str, Any]:
    """The ``servers.NAME`` section of one entry; a key that is wrong is named in
    ``problems`` and left out, the others kept (so their own checks still run)."""
    server: dict[str, Any] = {}
    kind = entry.get("transport", entry.get("type"))
    if kind is not None:
        field = "transport" if "transport" in entry else "type"
        if isinstance(kind, str) and kind.lower() in _TRANSPORTS:
            server["transport"] = _TRANSPORTS[kind.lower()]
        else:
            problems.error(
                f"{where}.{field}: expected one of {', '.join(sorted(_TRANSPORTS))}, "
                f"got {describe(kind)}"
            )
    if "command" in entry:
        command, args = entry["command"], entry.get("args", [])
        if not isinstance(command, str) or not command:
            problems.error(f"{where}.command: expected a program name, got {describe(command)}")
        elif not isinstance(args, list):
            problems.error(f"{where}.args: expected a list, got {describe(args)}")
        else:
            server["command"] = [command, *args]
    elif "args" in entry:
        problems.error(f"{where}.args: args without a command")
    urls = [key for key in ("url", "serverUrl", "httpUrl") if key in entry]
    if len(urls) > 1:
        problems.error(f"{where}.{urls[1]}: give one of url, serverUrl, httpUrl")
    if urls:
        server["url"] = entry[urls[0]]
        if urls[0] == "httpUrl" and kind is None:
            server["transport"] = "streamable-http"
    for key in ("headers", "env", "cwd", "tools", "prompts", "resources"):
        if key in entry:
            server[key] = entry[key]
    _tool_keys(where, entry, server, problems)
    return server


def _exact(name: str) -> str:
    """A glob that matches exactly ``name`` (hosts list names, not patterns)."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _names(where: str, value: Any, problems: Problems) -> list[str] | None:
    if isinstance(value, list) and all(isinstance(v, str) and v for v in value):
        return [_exact(v) for v in value]
    problems.error(f"{where}: expected a list of tool names, got {describe(value)}")
    return None


def _tool_keys(
    where: str, entry: dict[str, Any], server: dict[str, Any], problems: Problems
) -> None:
    """Hosts' keys for which tools are served, as ``tools.allow`` / ``tools.deny``."""
    allow: list[str] | None = None
    deny: list[str] = []
    if "includeTools" in entry:
        allow = _names(f"{where}.includeTools", entry["includeTools"], problems)
    for key in ("excludeTools", "disabledTools"):
        if key in entry:
            deny += _names(f"{where}.{key}", entry[key], problems) or []
    options = entry.get("options", {})
    if not isinstance(options, dict):
        problems.error(f"{where}.options: expected a mapping, got {describe(options)}")
        options = {}
    for key in sorted(set(options) - _OPTIONS_IGNORED - {"toolFilter"}):
        problems.error(
            f"{where}.options.{key}: not read by this proxy (options.toolFilter is; "
            f"authentication is auth:)"
        )
    found = options.get("toolFilter")
    if found is not None:
        at = f"{where}.options.toolFilter"
        mode = found.get("mode", "block") if isinstance(found, dict) else None
        listed = _names(f"{at}.list", found.get("list"), problems) if mode else None
        if mode not in ("allow", "block"):
            problems.error(
                f"{at}: expected {{mode: allow|block, list: [...]}}, got {describe(found)}"
            )
        elif listed is not None and mode == "block":
            deny += listed
        elif listed is not None:
            allow = listed if allow is None else [n for n in allow if n in listed]
    if allow is None and not deny:
        return
    tools = server.get("tools")
    if isinstance(tools, dict) and ("allow" in tools or "deny" in tools):
        problems.error(f"{where}.tools: give allow and deny here or in the host's keys, not both")
        return
    rules = dict(tools) if isinstance(tools, dict) else {}
    if allow is not None:
        rules["allow"] = allow
    if deny:
        rules["deny"] = deny
    server["tools"] = rules
