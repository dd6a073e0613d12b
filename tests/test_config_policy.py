"""proxy/config_policy.py: the tools / prompts / resources sections of a server, their
checks (every problem named by its key path), and the policy they compile to."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.config import ConfigError, Problems, collect_config, config_from_mapping
from proxy.config_policy import policy_of
from proxy.core.tool_policy import Kind
from proxy.servers import Server


def server(**rules: Any) -> dict[str, Any]:
    return {"servers": {"a": {"command": ["x"], **rules}}}


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        (
            {"tools": {"require": [{"names": ["x"]}]}},
            "servers.a.tools.require[0].scope: one OAuth scope",
        ),
        (
            {"tools": {"require": [{"scope": "a b", "names": ["x"]}]}},
            "servers.a.tools.require[0].scope:",
        ),
        (
            {"prompts": {"require": [{"scope": "s"}]}},
            "servers.a.prompts.require[0].names: give the names",
        ),
        (
            {"resources": {"require": [{"scope": "s", "names": []}]}},
            "servers.a.resources.require[0].names",
        ),
        ({"tools": {"rename": {"a": "x", "b": "x"}}}, "servers.a.tools.rename.b: 'x' is already"),
        ({"prompts": {"rename": {"a": ""}}}, "servers.a.prompts.rename.a: an empty name"),
        ({"resources": {"rename": {"a": "b"}}}, "servers.a.resources.rename: unknown key"),
        ({"resources": {"prefix": "p"}}, "servers.a.resources.prefix: unknown key"),
        ({"tools": {"allow": "x"}}, "servers.a.tools.allow: expected a list"),
    ],
)
def test_each_mistake_is_named(rules: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config_from_mapping(server(**rules))
    assert any(m.startswith(message) for m in caught.value.messages), caught.value.messages


def test_upstream_holds_rules_every_server_takes_unless_it_has_its_own() -> None:
    config = config_from_mapping(
        {
            "upstream": {"tools": {"deny": ["admin_*"]}},
            "servers": {
                "a": {"command": ["x"]},
                "b": {"command": ["y"], "tools": {"prefix": "b_"}},
            },
        }
    )
    a, b = (policy_of(config.servers[n]).view(None) for n in "ab")
    assert a.shown(Kind.TOOL, "admin_drop") is None and a.shown(Kind.TOOL, "get") == "get"
    assert b.shown(Kind.TOOL, "admin_drop") == "b_admin_drop"  # its own section replaces it


def test_scope_rules_without_jwt_auth_are_a_warning() -> None:
    rules = {"tools": {"require": [{"scope": "s", "names": ["x"]}]}}
    problems = Problems()
    collect_config(server(**rules), problems)
    assert problems.errors == []
    assert problems.warnings == [
        "servers.a.tools.require: scope rules limit only JWTs, and auth.jwt is not set: "
        "nobody is limited by them"
    ]
    problems = Problems()
    collect_config({**server(**rules), "auth": {"jwt": {"jwks_url": "https://i/jwks"}}}, problems)
    assert problems.warnings == []


def test_a_server_compiles_its_rules_once_and_again_for_a_new_config() -> None:
    """The rules in force are read at each request: a config put in place later applies."""
    config = config_from_mapping(server(tools={"deny": ["x"]}))
    first = Server("a", config.for_server(config.servers["a"]))
    policy = first.policy
    assert first.policy is policy and not policy.tools.permits("x", None)
    changed = config_from_mapping(server(tools={"deny": ["y"]}))
    first.config = changed.for_server(changed.servers["a"])
    assert first.policy.tools.permits("x", None) and not first.policy.tools.permits("y", None)
