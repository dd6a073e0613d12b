"""The rules of a config beyond each key's type and bounds (:mod:`proxy.config`'s
schema holds those): keys that must agree, servers' names and upstreams, paths the proxy
keeps for itself. Each rule raises ``ConfigError`` naming its key path, and each runs on
its own (:func:`proxy.config.collect_config`), so that one run names every broken rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from proxy.config_auth import check_auth
from proxy.config_rules import ConfigError

if TYPE_CHECKING:
    from proxy.config import Config, StoreConfig, UpstreamConfig

SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_RESERVED_PATHS = ("/ws", "/healthz", "/metrics", "/readyz", "/status", "/status.json")


def _check_store(store: StoreConfig) -> None:
    """A Redis namespace holds no hash tag (the store's own keys do: docs/stores.md); a
    Redis Cluster is reached over TCP and has only database 0."""
    if "{" in store.namespace or "}" in store.namespace or not store.namespace:
        raise ConfigError(f"store.namespace: non-empty, without braces: {store.namespace!r}")
    if store.kind == "redis" and store.cluster:
        url = urlsplit(store.url)
        if url.scheme not in ("redis", "rediss") or not url.hostname:
            raise ConfigError(
                f"store.url: with store.cluster, a redis:// or rediss:// URL naming a node "
                f"(host and port), got {store.url!r}"
            )
        if url.path.strip("/") not in ("", "0"):
            raise ConfigError(f"store.url: a Redis Cluster has only database 0, got {url.path!r}")


def _check_intervals(config: Config) -> None:
    interval = config.streams.resume_interval
    if interval.min > interval.max:
        raise ConfigError(
            f"streams.resume_interval.min: must not exceed max ({interval.min} > {interval.max})"
        )


def _check_token_secret(config: Config) -> None:
    if config.streams.token_secret is not None and len(config.streams.token_secret) < 16:
        raise ConfigError("streams.token_secret: use at least 16 characters")


def check_server(name: str, server: UpstreamConfig) -> None:
    if not SERVER_NAME.fullmatch(name):
        raise ConfigError(
            f"servers.{name}: a server name is 1-64 letters, digits, '_', '.' or "
            f"'-', starting with a letter or digit"
        )
    check_upstream(server, f"servers.{name}")
    if not server.configured:
        raise ConfigError(f"servers.{name}: give a command (stdio) or a url")


def _check_listen_path(config: Config) -> None:
    path = config.listen.path
    if not path.startswith("/"):
        raise ConfigError(f"listen.path: must start with '/', got {path!r}")
    if path in _RESERVED_PATHS or path == "/servers" or path.startswith("/servers/"):
        raise ConfigError(f"listen.path: {path} is taken by the proxy itself")


def _check_pool(config: Config) -> None:
    pool = config.modern.pool
    if pool.max_size < pool.size:
        raise ConfigError(
            f"modern.pool.max_size: must be at least modern.pool.size ({pool.max_size} < "
            f"{pool.size})"
        )


# The rules beyond one key's type and bounds, each run on its own (collect_config).
RULES: tuple[Callable[[Config], None], ...] = (
    _check_intervals,
    _check_token_secret,
    _check_listen_path,
    lambda config: _check_store(config.store),
    lambda config: check_auth(config.auth),
    _check_pool,
)


def check_upstream(up: UpstreamConfig, where: str) -> None:
    if up.url and up.command:
        raise ConfigError(f"{where}: give either command (stdio) or url, not both")
    if up.url is not None:
        scheme = up.url.partition("://")[0].lower()
        if scheme not in ("http", "https", "ws", "wss") or "://" not in up.url:
            raise ConfigError(
                f"{where}.url: expected an http(s):// or ws(s):// URL, got {up.url!r}"
            )
        if up.transport == "stdio":
            raise ConfigError(f"{where}.transport: stdio needs {where}.command, not a url")
    elif up.transport not in ("auto", "stdio"):
        raise ConfigError(f"{where}.transport: {up.transport} needs {where}.url")
