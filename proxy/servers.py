"""The named MCP servers one proxy fronts (``servers:``, or ``upstream:`` alone as
"default"): each has its own config view, health, routes, session limit and modern
pool; the registry, the store, the byte budget and the metrics are shared.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.config import Config
from proxy.config_policy import policy_of
from proxy.config_upstream import UpstreamConfig
from proxy.core.dual_era import eras_served
from proxy.core.tool_policy import Policy
from proxy.upstream.base import UpstreamHealth

SERVERS_PREFIX = "/servers/"


@dataclass(eq=False)
class Server:
    """One upstream MCP server, as every part of the proxy sees it."""

    name: str
    config: Config  # the proxy's config with ``upstream`` = this server's
    health: UpstreamHealth = field(default_factory=UpstreamHealth)
    sessions: int = 0  # its live client sessions, and those starting
    removed: bool = False  # a reload took it out of the config: it drains (proxy/reload.py)
    _policy: tuple[UpstreamConfig, Policy] | None = field(default=None, repr=False)

    @property
    def upstream(self) -> UpstreamConfig:
        return self.config.upstream

    @property
    def policy(self) -> Policy:
        """Its tool, prompt and resource rules (docs/tools.md), compiled once per config
        (a config put in place later, by a reload, is compiled anew)."""
        upstream = self.config.upstream
        if self._policy is None or self._policy[0] is not upstream:
            self._policy = (upstream, policy_of(upstream))
        return self._policy[1]

    @property
    def mcp_path(self) -> str:
        return f"{SERVERS_PREFIX}{self.name}/mcp"

    @property
    def ws_path(self) -> str:
        return f"{SERVERS_PREFIX}{self.name}/ws"

    @property
    def dual_era(self) -> str:
        """The era a dual-era client of this server is served (``modern``, ``legacy``)."""
        return self.upstream.dual_era or self.config.modern.dual_era

    def eras(self) -> dict[str, str]:
        """What this server's clients are served and can resume (startup log, ``/status``)."""
        modern, tasks = self.config.modern, self.config.tasks
        return eras_served(modern.enabled, self.dual_era, tasks.enabled)

    def health_dict(self) -> dict[str, object]:
        """This server for ``/healthz`` and the status page."""
        return {
            "transport": self.upstream.kind,
            "sessions": self.sessions,
            **self.health.as_dict(),
        }


def servers_of(config: Config) -> dict[str, Server]:
    """Every configured server by name, in the order of the config file."""
    return {
        name: Server(name, config.for_server(upstream))
        for name, upstream in config.upstreams().items()
    }
