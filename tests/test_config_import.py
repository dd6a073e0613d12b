"""proxy/config_import.py: the keys hosts use in ``mcpServers`` for which tools a server
shows (Gemini CLI ``includeTools`` / ``excludeTools``, Roo Code ``disabledTools``, TBXark
mcp-proxy ``options.toolFilter``), read as this proxy's ``tools`` rules (docs/tools.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.config import ConfigError, load_config
from proxy.config_policy import policy_of
from proxy.core.tool_policy import Kind

TOOLS = ["read_file", "write_file", "delete_file", "odd*name"]


def shown(tmp_path: Path, entry: dict[str, Any]) -> list[str]:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"mcpServers": {"fs": {"command": "srv", **entry}}}))
    view = policy_of(load_config(path).servers["fs"]).view(None)
    return [n for n in TOOLS if view.shown(Kind.TOOL, n) is not None]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({}, TOOLS),
        ({"includeTools": ["read_file", "write_file"]}, ["read_file", "write_file"]),
        ({"excludeTools": ["delete_file"]}, ["read_file", "write_file", "odd*name"]),
        # Gemini CLI: excludeTools wins over includeTools
        (
            {"includeTools": ["read_file", "delete_file"], "excludeTools": ["delete_file"]},
            ["read_file"],
        ),
        (
            {"disabledTools": ["write_file"], "alwaysAllow": ["read_file"]},
            ["read_file", "delete_file", "odd*name"],
        ),
        ({"options": {"toolFilter": {"mode": "allow", "list": ["delete_file"]}}}, ["delete_file"]),
        (
            {
                "options": {
                    "toolFilter": {"mode": "block", "list": ["delete_file"]},
                    "logEnabled": True,
                }
            },
            ["read_file", "write_file", "odd*name"],
        ),
        (
            {"options": {"toolFilter": {"list": ["read_file"]}}},
            ["write_file", "delete_file", "odd*name"],
        ),  # block by default
        # hosts list names, not patterns: a * in one is that character
        ({"excludeTools": ["odd*name", "read_*"]}, ["read_file", "write_file", "delete_file"]),
        # this proxy's own section, in an entry
        ({"tools": {"deny": ["*_file"]}}, ["odd*name"]),
    ],
)
def test_hosts_keys_become_tool_rules(
    tmp_path: Path, entry: dict[str, Any], expected: list[str]
) -> None:
    assert shown(tmp_path, entry) == expected


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"includeTools": "read_file"},
            "mcpServers.fs.includeTools: expected a list of tool names",
        ),
        ({"excludeTools": [1]}, "mcpServers.fs.excludeTools: expected a list of tool names"),
        (
            {"options": {"authTokens": ["t"]}},
            "mcpServers.fs.options.authTokens: not read by this proxy",
        ),
        (
            {"options": {"toolFilter": {"mode": "maybe", "list": []}}},
            "mcpServers.fs.options.toolFilter: expected",
        ),
        ({"options": []}, "mcpServers.fs.options: expected a mapping"),
        (
            {"excludeTools": ["a"], "tools": {"deny": ["b"]}},
            "mcpServers.fs.tools: give allow and deny here or in the host's keys, not both",
        ),
        (
            {"tools": {"rename": {"a": "x", "b": "x"}}},
            "mcpServers.fs.tools.rename.b: 'x' is already",
        ),
    ],
)
def test_wrong_host_keys_are_named_as_the_file_has_them(
    tmp_path: Path, entry: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        shown(tmp_path, entry)
    assert any(m.startswith(message) for m in caught.value.messages), caught.value.messages
