"""YAML → typed, validated configuration. Every error names the key path.

The schema is :class:`Config` below, its sections in :mod:`proxy.config_sections` and
:mod:`proxy.config_upstream` (and the ``config_*`` modules they name); ``config/*.yaml``
are annotated examples. Unknown keys, wrong types and values out of bounds are refused at
start (``ConfigError``), never silently ignored. A key's bounds are on its field,
``Annotated[float, Positive]``: every number has one (``tests/test_config.py`` checks).
The session's knobs take their defaults from :class:`~proxy.core.session.SessionSettings`,
so the two cannot disagree. This module reads a file or a mapping into a :class:`Config`
and checks the rules between keys.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from proxy.config_auth import AuthConfig, check_auth, jwt_enabled
from proxy.config_file import read_config_file
from proxy.config_import import KEY, file_key_path, from_mcp_servers, is_mcp_servers
from proxy.config_resource import check_resource_server
from proxy.config_rules import (  # re-exported: the schema's users import them from here
    Bound,
    ConfigError,
    OneOf,
    Problems,
    build,
    interpolate,
    interpolated,
    shown_url,
)
from proxy.config_sections import (
    ListenConfig,
    LogConfig,
    ModernConfig,
    SessionsConfig,
    SseConfig,
    StoreConfig,
    StreamsConfig,
    TasksConfig,
)
from proxy.config_tracing import TracingConfig
from proxy.config_upstream import UpstreamConfig, check_upstream
from proxy.core.session import SessionSettings

__all__ = ["Bound", "ConfigError", "OneOf", "Problems", "interpolate"]


@dataclass(frozen=True)
class Config:
    listen: ListenConfig = field(default_factory=ListenConfig)
    # The MCP server: alone, it is served at listen.path and /ws. With servers set, only
    # defaults for the keys a server does not set (command and url belong to servers).
    upstream: UpstreamConfig = field(default_factory=UpstreamConfig)
    # Several named MCP servers, each at /servers/NAME/mcp and /servers/NAME/ws (and at
    # listen.path and /ws too when there is exactly one). Each key is an upstream: section.
    servers: dict[str, UpstreamConfig] = field(default_factory=dict)
    sse: SseConfig = field(default_factory=SseConfig)
    sessions: SessionsConfig = field(default_factory=SessionsConfig)
    streams: StreamsConfig = field(default_factory=StreamsConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    modern: ModernConfig = field(default_factory=ModernConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    log: LogConfig = field(default_factory=LogConfig)
    # OpenTelemetry traces (docs/tracing.md); off unless set here or by OTEL_* variables.
    tracing: TracingConfig = field(default_factory=TracingConfig)

    def upstreams(self) -> dict[str, UpstreamConfig]:
        """Every MCP server by name: ``servers``, or ``upstream`` alone as "default"."""
        return dict(self.servers) if self.servers else {DEFAULT_SERVER: self.upstream}

    def for_server(self, upstream: UpstreamConfig) -> Config:
        """This config as one server sees it: ``upstream`` is that server's."""
        return dataclasses.replace(self, upstream=upstream)

    def session_settings(self, token_secret: bytes = b"") -> SessionSettings:
        s = self.sessions
        st = self.streams
        return SessionSettings(
            stream_methods=tuple(st.methods),
            create_after=st.create_after_ms / 1000,
            resume_interval_min=st.resume_interval.min,
            resume_interval_max=st.resume_interval.max,
            notification_shape=st.notification_shape,
            detach_after_create=st.detach_after_create,
            event_id_in_meta=st.event_id_in_meta,
            legacy_tasks=self.tasks.enabled and self.modern.enabled,
            token_secret=token_secret,
            retry_ms=self.sse.retry_ms,
            max_stream_seconds=self.sse.max_stream_seconds,
            completed_retention=s.completed_retention_seconds,
            idle_timeout=s.idle_timeout_seconds,
            stream_max_events=s.stream_max_events,
            stream_max_bytes=s.stream_max_bytes,
            standalone_max_events=s.standalone_max_events,
            max_streams=s.max_streams_per_session,
            overflow=s.overflow,
        )


DEFAULT_SERVER = "default"
SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_RESERVED_PATHS = ("/ws", "/healthz", "/metrics", "/readyz", "/status", "/status.json")


def _with_defaults(data: Any, problems: Problems) -> Any:
    """Each server's section on top of ``upstream:``, which holds defaults for them."""
    if not isinstance(data, dict) or not data.get("servers"):
        return data
    servers, defaults = data["servers"], data.get("upstream") or {}
    if not isinstance(servers, dict):
        return data  # build() names the problem
    if isinstance(defaults, dict):
        for key in ("command", "url"):
            if defaults.get(key):
                problems.error(
                    f"upstream.{key}: with servers set, upstream holds only defaults for "
                    f"them; put the {key} under servers.NAME"
                )
        defaults = {k: v for k, v in defaults.items() if k not in ("command", "url")}
    else:
        defaults = {}
    merged = {
        name: {**defaults, **entry} if isinstance(entry, dict) else entry
        for name, entry in servers.items()
    }
    return {**data, "servers": merged}


def config_from_mapping(data: Any) -> Config:
    """The config of ``data`` (a file's mapping, interpolated); ``ConfigError`` names
    every problem, one a message."""
    problems = Problems()
    config = collect_config(data, problems)
    problems.raise_any()
    return config


def collect_config(data: Any, problems: Problems) -> Config:
    """The config of ``data`` with every problem collected in ``problems``: a key that is
    wrong takes its default, and each rule between keys runs on its own (a ``with``
    block each), so that one run names them all."""
    config: Config = build("", Config, _with_defaults(data, problems), problems)
    interval = config.streams.resume_interval
    if interval.min > interval.max:
        problems.error(
            f"streams.resume_interval.min: must not exceed max ({interval.min} > {interval.max})"
        )
    if config.streams.token_secret is not None and len(config.streams.token_secret) < 16:
        problems.error("streams.token_secret: use at least 16 characters")
    if config.servers:
        for name, server in config.servers.items():
            with problems.collecting():
                if not SERVER_NAME.fullmatch(name):
                    raise ConfigError(
                        f"servers.{name}: a server name is 1-64 letters, digits, '_', '.' or "
                        f"'-', starting with a letter or digit"
                    )
                check_upstream(server, f"servers.{name}")
                where = f"servers.{name}"
                if not server.configured and not problems.names(f"{where}.command", f"{where}.url"):
                    raise ConfigError(f"{where}: give a command (stdio) or a url")
    else:
        with problems.collecting():
            check_upstream(config.upstream, "upstream")
    path = config.listen.path
    if not path.startswith("/"):
        problems.error(f"listen.path: must start with '/', got {path!r}")
    with problems.collecting():
        _check_store(config.store)
    with problems.collecting():
        check_auth(config.auth)
    for name, server in config.upstreams().items():
        where = f"servers.{name}" if config.servers else "upstream"
        scoped = [k for k in ("tools", "prompts", "resources") if getattr(server, k).require]
        if scoped and not jwt_enabled(config.auth.jwt):
            problems.warning(
                f"{where}.{scoped[0]}.require: scope rules limit only JWTs, and auth.jwt is "
                f"not set: nobody is limited by them"
            )
    with problems.collecting():
        where = "servers.{}" if config.servers else "upstream"
        scopes = {where.format(n): up.required_scopes for n, up in config.upstreams().items()}
        check_resource_server(config.auth, config.listen.host, scopes)
    pool = config.modern.pool
    if pool.max_size < pool.size:
        problems.error(
            f"modern.pool.max_size: must be at least modern.pool.size ({pool.max_size} < "
            f"{pool.size})"
        )
    if path in _RESERVED_PATHS or path == "/servers" or path.startswith("/servers/"):
        problems.error(f"listen.path: {path} is taken by the proxy itself")
    return config


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
                f"(host and port), got {shown_url(store.url)!r}"
            )
        if url.path.strip("/") not in ("", "0"):
            raise ConfigError(f"store.url: a Redis Cluster has only database 0, got {url.path!r}")


def load_config(path: str | Path) -> Config:
    """The config of the file ``path``; ``ConfigError`` names every problem in it."""
    problems = Problems()
    config = collect_file(path, problems)
    problems.raise_any()
    assert config is not None  # else a problem says why
    return config


def collect_file(path: str | Path, problems: Problems) -> Config | None:
    """The config of the file ``path``, its problems collected in ``problems`` with their
    key paths as the file has them (``mcpServers.NAME.args[0]``: ``problems.rename`` is
    set for those found later too); None when the file cannot be read or parsed."""
    try:
        data = read_config_file(path)
    except ConfigError as exc:
        problems.add(exc)
        return None
    if not is_mcp_servers(data):
        return collect_config(interpolated(data, "", problems), problems)
    # Name the keys as the file has them: this proxy's servers.x is its mcpServers.x.
    entries = data[KEY] if isinstance(data[KEY], dict) else {}
    problems.rename = lambda message: file_key_path(message, entries)
    mapping = from_mcp_servers(data, problems)
    return collect_config(interpolated(mapping, "", problems), problems)


def override(config: Config, section: str, **values: Any) -> Config:
    """A copy of ``config`` with some keys of one section replaced (CLI flags win)."""
    values = {k: v for k, v in values.items() if v is not None}
    if not values:
        return config
    part = dataclasses.replace(getattr(config, section), **values)
    return dataclasses.replace(config, **{section: part})
