"""What a reload would change, decided from the running config and the new one alone
(no I/O): which servers are added, removed or changed, and which changed settings only a
restart can apply. :mod:`proxy.reload` carries the plan out (docs/reference.md#reload).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from proxy.config import Config

RESTART_ONLY: tuple[str, ...] = (
    # The socket and what guards it are made once, at start.
    "listen.host",
    "listen.port",
    "listen.path",
    "listen.header_timeout_seconds",
    "listen.body_timeout_seconds",
    "listen.max_inflight_body_bytes",
    "listen.max_connections",
    "listen.keepalive_timeout_seconds",
    "listen.watch_config",
    # The store is opened once; resume tokens already given are signed with this key.
    "store",
    "streams.token_secret",
    # One budget for every session; aiohttp's body limit is the app's.
    "sessions.max_buffered_bytes",
    "sessions.max_message_bytes",
    # Each server's modern side (pool, tasks) is built with these at start.
    "modern",
    "tasks",
    # The tracer provider and its exporter are made once, at start (proxy/tracing).
    "tracing",
)
"""The settings (and sections) a reload cannot apply: a file that changes one of them is
refused whole, naming them."""


@dataclass(frozen=True)
class ReloadPlan:
    added: tuple[str, ...] = ()  # servers that start serving
    removed: tuple[str, ...] = ()  # servers that drain, then end
    changed: tuple[str, ...] = ()  # servers whose own upstream settings changed
    restart_only: tuple[str, ...] = ()  # changed keys a reload refuses (see RESTART_ONLY)
    changed_keys: tuple[str, ...] = ()  # every changed key outside servers, for the log

    @property
    def refused(self) -> bool:
        return bool(self.restart_only)

    def summary(self) -> dict[str, list[str]]:
        """For the log and ``/status``: names and key paths only, never values."""
        return {
            "added": list(self.added),
            "removed": list(self.removed),
            "changed": list(self.changed),
            "settings": list(self.changed_keys),
        }


def plan_reload(old: Config, new: Config) -> ReloadPlan:
    """The plan that takes a proxy running ``old`` to ``new``."""
    before, after = old.upstreams(), new.upstreams()
    keys = list(
        changed_paths(_without_servers(old), _without_servers(new))
    )  # upstream/servers compared below, by server
    restart = tuple(k for k in keys if _restart_only(k))
    return ReloadPlan(
        added=tuple(name for name in after if name not in before),
        removed=tuple(name for name in before if name not in after),
        changed=tuple(name for name in after if name in before and before[name] != after[name]),
        restart_only=restart,
        changed_keys=tuple(keys),
    )


def _restart_only(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in RESTART_ONLY)


def _without_servers(config: Config) -> dict[str, Any]:
    data = dataclasses.asdict(config)
    data.pop("servers", None)
    data.pop("upstream", None)
    return data


def changed_paths(old: Any, new: Any, prefix: str = "") -> Iterator[str]:
    """The dotted key paths whose values differ between two ``asdict`` trees (a mapping
    whose keys differ is named as a whole, its keys being data, e.g. env names)."""
    if isinstance(old, dict) and isinstance(new, dict) and old.keys() == new.keys():
        for key in old:
            yield from changed_paths(old[key], new[key], f"{prefix}.{key}" if prefix else key)
    elif old != new:
        yield prefix
