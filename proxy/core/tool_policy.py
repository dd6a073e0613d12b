"""Which tools, prompts and resources a client is shown and may use, and by which names:
the operator's rules and the OAuth scope rules of one server, as one pure decision
(docs/tools.md).

Rules are per kind (``tools``, ``prompts``, ``resources``) and match the server's own
names (a resource by its URI) with globs (``*``, ``?``, ``[abc]``, case-sensitive; ``*``
crosses ``/``). A name is *permitted* to a principal when ``allow`` is unset or one of
its globs matches, no ``deny`` glob matches, and the principal holds the ``scope`` of
every ``require`` rule whose globs match. Scopes of ``None`` (a static token, auth off)
are limited by no ``require`` rule: only a credential that carries scopes is.

Tools and prompts may be shown by another name: ``rename`` (the server's name → the
name clients see and call, exact) wins; else ``prefix`` is put before the name. The
reverse is exact: a shown name leads to one server name or none, and a server name whose
shown name another one's rename took is not shown at all (its calls could not reach it).

What is hidden is refused exactly as the server refuses what it does not have
(2025-11-25 server/tools.mdx §Error Handling: ``-32602`` "Unknown tool";
server/prompts.mdx: ``-32602``; server/resources.mdx: ``-32002`` "Resource not found";
a modern client gets the latter in 2026-07-28 terms, :mod:`proxy.core.modern_errors`).
List answers are filtered page by page; ``nextCursor`` is kept as the server gave it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from proxy.core.errors import error_object
from proxy.core.protocol import INVALID_PARAMS

RESOURCE_NOT_FOUND: Final = -32002  # 2025-era code (server/resources.mdx §Error Handling)
_SHOWN_MAX = 200  # characters of a client's name quoted back in a refusal


class Kind(StrEnum):
    TOOL = "tool"
    PROMPT = "prompt"
    RESOURCE = "resource"


@dataclass(frozen=True)
class ScopeRule:
    """Names matching ``names`` need the OAuth scope ``scope``."""

    scope: str
    names: tuple[str, ...]


class Globs:
    """A set of glob patterns, compiled once into one regular expression."""

    __slots__ = ("_regex", "patterns")

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)
        joined = "|".join(f"(?:{fnmatch.translate(p)})" for p in self.patterns)
        self._regex = re.compile(joined) if self.patterns else None

    def __bool__(self) -> bool:
        return self._regex is not None

    def match(self, name: str) -> bool:
        return self._regex is not None and self._regex.match(name) is not None


@dataclass(frozen=True)
class Rules:
    """The rules of one kind. ``allow`` None: every name; ``rename`` and ``prefix`` only
    for tools and prompts."""

    kind: Kind
    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()
    rename: Mapping[str, str] = field(default_factory=dict)
    prefix: str = ""
    require: tuple[ScopeRule, ...] = ()
    _allow: Globs | None = field(init=False, repr=False, compare=False)
    _deny: Globs = field(init=False, repr=False, compare=False)
    _require: tuple[tuple[str, Globs], ...] = field(init=False, repr=False, compare=False)
    _back: dict[str, str] = field(init=False, repr=False, compare=False)
    _inert: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        shown = list(self.rename.values())
        if len(set(shown)) != len(shown):
            raise ValueError("two names renamed to the same name")
        object.__setattr__(self, "_allow", None if self.allow is None else Globs(self.allow))
        object.__setattr__(self, "_deny", Globs(self.deny))
        object.__setattr__(self, "_require", tuple((r.scope, Globs(r.names)) for r in self.require))
        object.__setattr__(self, "_back", {new: old for old, new in self.rename.items()})
        rules = (self.allow is not None, self.deny, self.rename, self.prefix, self.require)
        object.__setattr__(self, "_inert", not any(rules))

    @property
    def inert(self) -> bool:
        """No rule at all: every name is shown as the server gives it."""
        return self._inert

    @property
    def renames(self) -> bool:
        return bool(self.rename or self.prefix)

    def permits(self, name: str, scopes: frozenset[str] | None) -> bool:
        """May a principal with ``scopes`` see and use the server's ``name``?"""
        if self._allow is not None and not self._allow.match(name):
            return False
        if self._deny.match(name):
            return False
        if scopes is None:
            return True
        return all(scope in scopes for scope, globs in self._require if globs.match(name))

    def shown(self, name: str) -> str | None:
        """The name clients see for the server's ``name`` (None: it cannot be reached)."""
        new = self.rename.get(name)
        if new is not None:
            return new
        shown = self.prefix + name
        return None if shown in self._back else shown

    def server_name(self, shown: str) -> str | None:
        """The server's name behind the name a client used (None: none is shown so)."""
        old = self._back.get(shown)
        if old is not None:
            return old
        if not shown.startswith(self.prefix):
            return None
        name = shown[len(self.prefix) :]
        return None if name in self.rename else name


@dataclass(frozen=True)
class Policy:
    """One server's rules for the three kinds."""

    tools: Rules = field(default_factory=lambda: Rules(Kind.TOOL))
    prompts: Rules = field(default_factory=lambda: Rules(Kind.PROMPT))
    resources: Rules = field(default_factory=lambda: Rules(Kind.RESOURCE))

    _inert: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        inert = self.tools.inert and self.prompts.inert and self.resources.inert
        object.__setattr__(self, "_inert", inert)

    @property
    def inert(self) -> bool:
        return self._inert

    def view(self, scopes: frozenset[str] | None) -> View:
        return View(self, scopes)


OPEN = Policy()
"""No rules: everything passes untouched."""


def refusal(kind: Kind, name: Any) -> dict[str, Any]:
    """The error object the server gives for a name it does not have."""
    shown = str(name)[:_SHOWN_MAX]
    if kind is Kind.RESOURCE:
        return error_object(RESOURCE_NOT_FOUND, "Resource not found", {"uri": shown})
    return error_object(INVALID_PARAMS, f"Unknown {kind.value}: {shown}")


@dataclass(frozen=True)
class Forward:
    """Send the request on with ``params[key] = value`` (the server's name in it)."""

    key: str
    value: Any

    def applied(self, params: dict[str, Any]) -> dict[str, Any]:
        return {**params, self.key: self.value}


@dataclass(frozen=True)
class Refuse:
    """Answer the request with this error object, as the server would."""

    error: dict[str, Any]


# Requests that name one thing: method → (kind, the param that names it).
_NAMED: Final[dict[str, tuple[Kind, str]]] = {
    "tools/call": (Kind.TOOL, "name"),
    "prompts/get": (Kind.PROMPT, "name"),
    "resources/read": (Kind.RESOURCE, "uri"),
    "resources/subscribe": (Kind.RESOURCE, "uri"),
    "resources/unsubscribe": (Kind.RESOURCE, "uri"),
}
# List answers: method → (kind, the result's list, the key naming each item).
_LISTS: Final[dict[str, tuple[Kind, str, str]]] = {
    "tools/list": (Kind.TOOL, "tools", "name"),
    "prompts/list": (Kind.PROMPT, "prompts", "name"),
    "resources/list": (Kind.RESOURCE, "resources", "uri"),
    "resources/templates/list": (Kind.RESOURCE, "resourceTemplates", "uriTemplate"),
}
FILTERED_LISTS: Final = frozenset(_LISTS)


@dataclass(frozen=True)
class View:
    """A policy as one principal (its ``scopes``) sees it."""

    policy: Policy
    scopes: frozenset[str] | None

    @property
    def inert(self) -> bool:
        return self.policy.inert

    def rules(self, kind: Kind) -> Rules:
        p = self.policy
        return p.tools if kind is Kind.TOOL else p.prompts if kind is Kind.PROMPT else p.resources

    def server_name(self, kind: Kind, shown: str) -> str | None:
        """The server's name behind ``shown`` if this principal may use it, else None."""
        rules = self.rules(kind)
        name = rules.server_name(shown)
        if name is None or not rules.permits(name, self.scopes):
            return None
        return name

    def shown(self, kind: Kind, name: str) -> str | None:
        """The name this principal is shown for the server's ``name`` (None: hidden)."""
        rules = self.rules(kind)
        if not rules.permits(name, self.scopes):
            return None
        return rules.shown(name)

    def request(self, method: str, params: dict[str, Any]) -> Forward | Refuse | None:
        """A client request: None to send it as it is, else with the server's names
        (``Forward``) or refused (``Refuse``)."""
        if self.policy.inert:
            return None
        if method == "completion/complete":
            return self._completion(params)
        named = _NAMED.get(method)
        if named is None:
            return None
        kind, key = named
        return self._named(kind, params, key)

    def _named(self, kind: Kind, params: dict[str, Any], key: str) -> Forward | Refuse | None:
        rules = self.rules(kind)
        value = params.get(key)
        if rules.inert or not isinstance(value, str):
            return None  # a malformed request is the server's to refuse
        name = self.server_name(kind, value)
        if name is None:
            return Refuse(refusal(kind, value))
        return None if name == value else Forward(key, name)

    def _completion(self, params: dict[str, Any]) -> Forward | Refuse | None:
        ref = params.get("ref")
        if not isinstance(ref, dict):
            return None
        if ref.get("type") == "ref/prompt":
            kind, key = Kind.PROMPT, "name"
        elif ref.get("type") == "ref/resource":
            kind, key = Kind.RESOURCE, "uri"
        else:
            return None
        decided = self._named(kind, ref, key)
        if isinstance(decided, Forward):
            return Forward("ref", decided.applied(ref))
        return decided

    def answer(self, method: str, result: Any) -> Any:
        """A list result with what this principal may not see left out and the rest by
        the names it is shown; any other result as it is."""
        listed = _LISTS.get(method)
        if listed is None or self.policy.inert or not isinstance(result, dict):
            return result
        kind, key, item_key = listed
        rules = self.rules(kind)
        items = result.get(key)
        if rules.inert or not isinstance(items, list):
            return result
        kept = []
        for item in items:
            name = item.get(item_key) if isinstance(item, dict) else None
            if not isinstance(name, str):
                continue  # nothing to judge it by: not shown
            shown = self.shown(kind, name)
            if shown is None:
                continue
            kept.append(item if shown == name else {**item, item_key: shown})
        return {**result, key: kept}

    def shows_update(self, params: dict[str, Any]) -> bool:
        """Is ``notifications/resources/updated`` with these params for this principal?"""
        uri = params.get("uri")
        if self.policy.resources.inert or not isinstance(uri, str):
            return True
        return self.server_name(Kind.RESOURCE, uri) is not None

    def uris(self, uris: Iterable[str]) -> list[str]:
        """Of ``uris``, those this principal may use (modern resource subscriptions)."""
        return [u for u in uris if self.server_name(Kind.RESOURCE, u) is not None]
