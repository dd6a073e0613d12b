"""The operator's rules for what each server shows its clients (``servers.NAME.tools``,
``.prompts``, ``.resources``; docs/tools.md): the schema, its checks, and the pure
:class:`~proxy.core.tool_policy.Policy` it compiles to."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from proxy.config_rules import ConfigError
from proxy.core.tool_policy import Kind, Policy, Rules, ScopeRule


@dataclass(frozen=True)
class ScopeRequirement:
    # The OAuth scope a JWT must grant (its scope or scp claim) to see and use ...
    scope: str = ""
    # ... the names (globs, the server's own names; URIs for resources) listed here. A
    # name several rules match needs every one of their scopes. A static token, or no
    # auth, is not limited by these (it carries no scopes).
    names: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class NameRulesConfig:
    # Only the names one of these globs matches are shown and may be used (the server's
    # own names; * ? [abc], case-sensitive). null: every name.
    allow: list[str] | None = None
    # Names any of these globs matches are hidden (deny wins over allow). A hidden name
    # is refused as the server refuses one it does not have (-32602).
    deny: list[str] = field(default_factory=list)
    # The server's name: the name clients see and call instead (exact names). The call
    # reaches the server by its own name.
    rename: dict[str, str] = field(default_factory=dict)
    # Put before every name not renamed (e.g. "github_"), so that a host merging several
    # servers can tell their names apart.
    prefix: str = ""
    # OAuth scopes some names need: [{scope: mcp:admin, names: ["delete_*"]}].
    require: list[ScopeRequirement] = field(default_factory=list)


@dataclass(frozen=True)
class ResourceRulesConfig:
    # Only resources whose URI one of these globs matches (a template by its uriTemplate
    # text) are listed and may be read or subscribed to. null: every one.
    allow: list[str] | None = None
    # URIs any of these globs matches are hidden (-32002 Resource not found).
    deny: list[str] = field(default_factory=list)
    # OAuth scopes some URIs need, as for tools.
    require: list[ScopeRequirement] = field(default_factory=list)


class Ruled(Protocol):
    """A server's section (``UpstreamConfig``), as far as its rules go."""

    @property
    def tools(self) -> NameRulesConfig: ...
    @property
    def prompts(self) -> NameRulesConfig: ...
    @property
    def resources(self) -> ResourceRulesConfig: ...


def _require(items: list[ScopeRequirement]) -> tuple[ScopeRule, ...]:
    return tuple(ScopeRule(r.scope, tuple(r.names)) for r in items)


def policy_of(up: Ruled) -> Policy:
    """The pure policy of one server's rules (checked by :func:`check_policy`)."""
    t, p, r = up.tools, up.prompts, up.resources
    return Policy(
        tools=Rules(
            Kind.TOOL,
            None if t.allow is None else tuple(t.allow),
            tuple(t.deny),
            dict(t.rename),
            t.prefix,
            _require(t.require),
        ),
        prompts=Rules(
            Kind.PROMPT,
            None if p.allow is None else tuple(p.allow),
            tuple(p.deny),
            dict(p.rename),
            p.prefix,
            _require(p.require),
        ),
        resources=Rules(
            Kind.RESOURCE,
            None if r.allow is None else tuple(r.allow),
            tuple(r.deny),
            require=_require(r.require),
        ),
    )


def check_policy(up: Ruled, where: str) -> None:
    """The rules between keys: scopes and names given, renames to distinct names."""
    problems: list[str] = []
    for kind in ("tools", "prompts", "resources"):
        rules = getattr(up, kind)
        for i, rule in enumerate(rules.require):
            at = f"{where}.{kind}.require[{i}]"
            if not rule.scope or any(c.isspace() for c in rule.scope):
                problems.append(f"{at}.scope: one OAuth scope (no spaces), got {rule.scope!r}")
            if not rule.names:
                problems.append(f"{at}.names: give the names (globs) the scope is needed for")
        if kind == "resources":
            continue
        seen: dict[str, str] = {}
        for old, new in rules.rename.items():
            if not new or not old:
                problems.append(f"{where}.{kind}.rename.{old}: an empty name")
            elif new in seen:
                problems.append(
                    f"{where}.{kind}.rename.{old}: {new!r} is already the new name of {seen[new]!r}"
                )
            seen[new] = old
    if problems:
        raise ConfigError(*problems)
