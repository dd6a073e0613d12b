"""``subscriptions/listen`` rules (2026-07-28 ``basic/patterns/subscriptions.mdx``): pure.

- :func:`honoured` — the part of a listen filter the upstream can serve (what the
  acknowledgement lists): list-changed flags the server declared ``listChanged`` for,
  resource subscriptions if it declared ``subscribe``;
- :class:`Filter` — one listener's filter, and whether a server notification is for it;
- :func:`tagged` — the notification as the listener gets it, with its subscription id;
- :class:`Dedup` — the same change reported by several pooled sessions (one server process
  each) within ``DEDUP_SECONDS`` is delivered once. Time is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.core.era import META_SUBSCRIPTION

DEDUP_SECONDS = 0.25
_DEDUP_KEPT = 1024  # past this many remembered changes, the stale ones are forgotten
FLAGS = {
    "notifications/tools/list_changed": "toolsListChanged",
    "notifications/prompts/list_changed": "promptsListChanged",
    "notifications/resources/list_changed": "resourcesListChanged",
}
_AREAS = (
    ("tools", "toolsListChanged"),
    ("prompts", "promptsListChanged"),
    ("resources", "resourcesListChanged"),
)


def honoured(filter_: dict[str, Any], capabilities: dict[str, Any]) -> dict[str, Any]:
    """The part of a filter the upstream can serve (what the acknowledgement lists)."""
    out: dict[str, Any] = {}
    for area, flag in _AREAS:
        declared = capabilities.get(area)
        if filter_.get(flag) is True and isinstance(declared, dict) and declared.get("listChanged"):
            out[flag] = True
    uris = filter_.get("resourceSubscriptions")
    resources = capabilities.get("resources")
    if isinstance(uris, list) and isinstance(resources, dict) and resources.get("subscribe"):
        out["resourceSubscriptions"] = [u for u in uris if isinstance(u, str)]
    return out


@dataclass(eq=False)
class Filter:
    """What one listener asked for (and was granted)."""

    subscription_id: Any
    flags: set[str]
    uris: set[str]
    task_ids: set[str] = field(default_factory=set)

    def wants(self, method: str, params: dict[str, Any]) -> bool:
        if method == "notifications/resources/updated":
            return params.get("uri") in self.uris
        if method == "notifications/tasks":
            return params.get("taskId") in self.task_ids
        return FLAGS.get(method) in self.flags


def tagged(method: str, params: dict[str, Any], subscription_id: Any) -> dict[str, Any]:
    meta = dict(params.get("_meta") or {})
    meta[META_SUBSCRIPTION] = subscription_id
    return {"jsonrpc": "2.0", "method": method, "params": {**params, "_meta": meta}}


class Dedup:
    """Changes seen lately, by their serialisation."""

    def __init__(self) -> None:
        self._recent: dict[str, float] = {}

    def first(self, key: str, now: float) -> bool:
        """True if ``key`` was not seen within the window (it is remembered from now)."""
        if now - self._recent.get(key, -1e9) < DEDUP_SECONDS:
            return False
        self._recent[key] = now
        if len(self._recent) > _DEDUP_KEPT:
            self._recent = {k: t for k, t in self._recent.items() if now - t < DEDUP_SECONDS}
        return True
