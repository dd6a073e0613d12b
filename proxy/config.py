"""YAML → typed, validated configuration. Every error names the key path.

The schema is the dataclasses below; ``config/*.yaml`` are annotated examples. Unknown
keys, wrong types and values out of bounds are refused at start (``ConfigError``), never
silently ignored. A key's bounds are on its field, ``Annotated[float, Positive]``: every
number has one (``tests/test_config.py`` checks). The session's knobs take their defaults
from :class:`~proxy.core.session.SessionSettings`, so the two cannot disagree.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from proxy.config_auth import AuthConfig, check_auth, jwt_enabled
from proxy.config_file import read_config_file
from proxy.config_import import KEY, file_key_path, from_mcp_servers, is_mcp_servers
from proxy.config_oauth import UpstreamOAuthConfig, check_oauth
from proxy.config_policy import NameRulesConfig, ResourceRulesConfig, check_policy
from proxy.config_resource import check_resource_server
from proxy.config_rules import (  # re-exported: the schema's users import them from here
    Bound,
    ConfigError,
    NonNegative,
    OneOf,
    Positive,
    Problems,
    build,
    interpolate,
    interpolated,
    shown_url,
)
from proxy.config_strings import check_header, env_problems
from proxy.config_tracing import TracingConfig
from proxy.core.dual_era import DUAL_ERA_CHOICES
from proxy.core.httprules import LOCAL_HOSTNAMES
from proxy.core.session import SessionSettings

__all__ = ["Bound", "ConfigError", "OneOf", "Problems", "interpolate"]


DRAIN_SECONDS_MAX = 3600.0  # listen.drain_seconds (and MCP_RESUME_PROXY_DRAIN_SECONDS)

# The session's knobs: their defaults are the core's (proxy/core/session_state.py).
_CORE = SessionSettings()


@dataclass(frozen=True)
class ListenConfig:
    host: str = "127.0.0.1"
    # 0: any free port (the bound one is logged: proxy_listening).
    port: Annotated[int, Bound(0, 65535)] = 8808
    path: str = "/mcp"
    # DNS-rebinding guards (2025-11-25 transports §Security). Add the names clients use
    # when you bind beyond loopback; "*" turns a check off.
    allowed_hosts: list[str] = field(default_factory=lambda: list(LOCAL_HOSTNAMES))
    allowed_origins: list[str] = field(default_factory=lambda: list(LOCAL_HOSTNAMES))
    # Reading a request is bounded in time and memory (slow or stalled clients): its
    # headers must be complete this long after its first byte (or after the connection
    # opened); its body this long after its headers (else 408, connection closed).
    # Responses (SSE streams) are never cut by these; idle connections: keepalive below.
    header_timeout_seconds: Annotated[float, Positive] = 10.0
    body_timeout_seconds: Annotated[float, Positive] = 30.0
    # POST bodies being received, all connections together; a POST that would pass it
    # gets 503 (too_many_body_bytes) before its body is read.
    max_inflight_body_bytes: Annotated[int, Positive] = 64 * 1024 * 1024
    # Open client connections; beyond it a new one gets 503 (too_many_connections) and
    # is closed, while open ones go on.
    max_connections: Annotated[int, Positive] = 1024
    # A connection idle between requests is closed after this long, so idle keep-alive
    # connections cannot hold max_connections slots (aiohttp's own default is an hour).
    keepalive_timeout_seconds: Annotated[float, Positive] = 75.0
    # SIGTERM drains first: /readyz turns 503, new sessions and calls get 503
    # (proxy_draining), calls in flight may finish for up to this long; then what is
    # left gets proxy_shutdown. 0: no drain. Env MCP_RESUME_PROXY_DRAIN_SECONDS wins.
    drain_seconds: Annotated[float, Bound(0, DRAIN_SECONDS_MAX)] = 30.0
    # Reload the config when its file (or auth.tokens_file) changes, as SIGHUP does
    # (docs/reference.md#reload); a reload also drains servers it removes this long.
    watch_config: bool = False


UPSTREAM_TRANSPORTS = ("auto", "stdio", "streamable-http", "sse", "websocket")
STANDALONE_STREAM_CHOICES = ("open", "on_client_get")


@dataclass(frozen=True)
class UpstreamConfig:
    # Either a stdio command (one process per client session) ...
    command: list[str] = field(default_factory=list)
    # ... or the URL of a remote server (one upstream session per client session).
    url: str | None = None
    # auto: ws:// and wss:// are WebSocket, a path ending in /sse is the 2024-11-05
    # HTTP+SSE transport, anything else Streamable HTTP.
    transport: Annotated[str, OneOf(UPSTREAM_TRANSPORTS)] = "auto"
    # Sent with every request to a URL upstream (e.g. Authorization). "${NAME}" in a value
    # is replaced by the environment variable NAME at start; never logged.
    headers: dict[str, str] = field(default_factory=dict)
    # Streamable HTTP: OAuth tokens the proxy obtains and refreshes itself (docs/upstreams.md).
    oauth: UpstreamOAuthConfig = field(default_factory=UpstreamOAuthConfig)
    connect_timeout_seconds: Annotated[float, Positive] = 10.0
    # A network upstream that stays unreachable this long ends its client sessions.
    reconnect_max_seconds: Annotated[float, Positive] = 30.0
    # Streamable HTTP: when the proxy opens its GET stream for what the server sends outside
    # any request (list_changed, resource updates, log messages). open: once the client's
    # notifications/initialized is accepted, for the whole session (an open connection per
    # session, idle or not). on_client_get: once the client itself opens a GET on its
    # session or a /ws socket; what the server sends before that is lost unless the server
    # keeps it, and a session whose client never listens holds no connection upstream.
    standalone_stream: Annotated[str, OneOf(STANDALONE_STREAM_CHOICES)] = "open"
    env: dict[str, str] = field(default_factory=dict)
    inherit_env: bool = True
    cwd: str | None = None
    # Stdin closed, then SIGTERM to the process group, then SIGKILL (0: at once).
    stop_grace_seconds: Annotated[float, NonNegative] = 5.0
    # One message from the server (a line over stdio, an event, a frame, a body): a longer
    # one is skipped and its request answered with an error (upstream_message_too_large).
    # 64 MiB: a 20 MB tool result (file, screenshot, base64 image) passes with room.
    max_line_bytes: Annotated[int, Positive] = 64 * 1024 * 1024
    # A server that stops reading its stdin: past this many bytes waiting for it, new
    # POSTs of the session get 503 (upstream_busy) instead of piling up in memory.
    max_pending_bytes: Annotated[int, Positive] = 16 * 1024 * 1024
    # stdio: a server process that exits on its own (after the session's initialize) is
    # started again, after a jittered backoff, and re-initialized with the client's own
    # initialize; its requests in flight get errors (data.reason upstream_restarted).
    restart: bool = True
    # ... unless it exits this many times within restart_window_seconds (a crash loop):
    # then the session ends and /readyz says why for a window.
    restart_max: Annotated[int, Positive] = 5
    restart_window_seconds: Annotated[float, Positive] = 60.0
    # Client sessions of this upstream at once (legacy era); a new initialize beyond it
    # gets 503 (too_many_sessions). null: only sessions.max_sessions, over all upstreams.
    max_sessions: Annotated[int | None, Positive] = None
    # stdio, opt-in: a session with no client connection open (an open GET stream counts)
    # and no request in flight for this long has its server process stopped; the session
    # and its streams stay, and its next request starts the process again, re-initialized
    # with the client's own initialize. State held in the process is lost: only for
    # servers that keep none. null: the process runs as long as its session.
    stop_idle_seconds: Annotated[float | None, Positive] = None
    # The era a client that speaks both (fastmcp, SDKs in auto mode) is served: modern
    # (2026-07-28, no resumption without Tasks) or legacy (2025-11-25, resumes with
    # Last-Event-ID). null: modern.dual_era.
    dual_era: Annotated[str | None, OneOf(DUAL_ERA_CHOICES)] = None
    # Which tools, prompts and resources clients are shown and may use, by which names,
    # and which OAuth scopes some need (docs/tools.md). Unset: everything, as the server
    # lists it.
    tools: NameRulesConfig = field(default_factory=NameRulesConfig)
    prompts: NameRulesConfig = field(default_factory=NameRulesConfig)
    resources: ResourceRulesConfig = field(default_factory=ResourceRulesConfig)
    # Inbound, with auth.jwt: scopes a JWT must grant at this server's paths, beside
    # auth.jwt.required_scopes (else 403 insufficient_scope); named in its metadata.
    required_scopes: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """Which transport: stdio, streamable-http, sse or websocket."""
        if self.transport != "auto":
            return self.transport
        if not self.url:
            return "stdio"
        scheme, _, rest = self.url.partition("://")
        if scheme.lower() in ("ws", "wss"):
            return "websocket"
        path = rest.partition("?")[0].rstrip("/")
        return "sse" if path.endswith("/sse") else "streamable-http"

    @property
    def configured(self) -> bool:
        return bool(self.command or self.url)

    def describe(self) -> str:
        """The command or URL, for logs (never a header value, nor the URL's user info,
        query or fragment: any may carry a credential)."""
        return shown_url(self.url) if self.url else " ".join(self.command)

    def resolved_command(self, where: str = "upstream") -> list[str]:
        """``command`` with ``${NAME}`` (``${NAME:-default}``) replaced from the environment
        (ConfigError if unset without a default, or if an argument holds a NUL): it is kept
        as written in the config, so that logs and ``/status`` never show what a variable
        held (an argument may be a credential)."""
        resolved = [interpolate(arg, f"{where}.command[{i}]") for i, arg in enumerate(self.command)]
        for i, arg in enumerate(resolved):
            if "\x00" in arg:
                raise ConfigError(f"{where}.command[{i}]: holds a NUL character")
        return resolved

    def resolved_headers(self, where: str = "upstream") -> dict[str, str]:
        """``headers`` with ``${NAME}`` (``${NAME:-default}``) replaced from the environment
        (ConfigError if unset without a default, or if a header cannot be sent)."""
        resolved = {
            name: interpolate(value, f"{where}.headers.{name}")
            for name, value in self.headers.items()
        }
        for name, value in resolved.items():
            check_header(name, value, f"{where}.headers")
        return resolved


@dataclass(frozen=True)
class SseConfig:
    keepalive_seconds: Annotated[float, Positive] = 15.0
    retry_ms: Annotated[int, Positive] = _CORE.retry_ms
    # Close response streams after this long so 2025-11-25 clients poll-reconnect
    # (SEP-1699). null: keep them open until the response.
    max_stream_seconds: Annotated[float | None, Positive] = _CORE.max_stream_seconds
    # A client that lets more than this wait unread loses its connection (not its
    # stream): it resumes with Last-Event-ID. Bounds the memory a slow reader can cost.
    max_queued_bytes: Annotated[int, Positive] = 4 * 1024 * 1024
    # A POST that carries one request holds its response headers this long for the answer
    # (legacy era): an answer of json_answer_min_bytes or more that comes alone in this
    # window is sent as application/json, which clients read without an SSE event-size cap
    # (the Python SDK's is 1 MiB); a JSON body cut in transfer cannot be resumed. The
    # priming event waits as long. 0: SSE at once, as before.
    json_answer_window_ms: Annotated[int, NonNegative] = 2000
    json_answer_min_bytes: Annotated[int, NonNegative] = 256 * 1024


@dataclass(frozen=True)
class SessionsConfig:
    idle_timeout_seconds: Annotated[float, Positive] = _CORE.idle_timeout
    # 0: a completed stream nobody is reading is forgotten at once.
    completed_retention_seconds: Annotated[float, NonNegative] = _CORE.completed_retention
    max_message_bytes: Annotated[int, Positive] = 4 * 1024 * 1024
    stream_max_events: Annotated[int, Positive] = _CORE.stream_max_events
    stream_max_bytes: Annotated[int, Positive] = _CORE.stream_max_bytes
    standalone_max_events: Annotated[int, Positive] = _CORE.standalone_max_events
    max_sessions: Annotated[int, Positive] = 256  # a new initialize beyond this gets 503
    max_streams_per_session: Annotated[int, Positive] = _CORE.max_streams
    max_buffered_bytes: Annotated[int, Positive] = 1024**3  # all streams of all sessions
    # Past a stream's bound: "block" stops reading the server until a client takes what
    # it was never sent (nothing lost); "truncate" drops the oldest events instead.
    overflow: Annotated[str, OneOf(("block", "truncate"))] = _CORE.overflow


@dataclass(frozen=True)
class ResumeIntervalConfig:
    # Seconds a client SHOULD wait before resuming or polling.
    min: Annotated[float, NonNegative] = _CORE.resume_interval_min
    # Seconds without resume or poll before a stream is abandoned.
    max: Annotated[float, Positive] = _CORE.resume_interval_max


@dataclass(frozen=True)
class StreamsConfig:
    """The seed's stream protocol, for clients that declare ``capabilities.streams``."""

    methods: list[str] = field(default_factory=lambda: list(_CORE.stream_methods))
    create_after_ms: Annotated[int, NonNegative] = round(_CORE.create_after * 1000)
    resume_interval: ResumeIntervalConfig = field(default_factory=ResumeIntervalConfig)
    notification_shape: Annotated[str, OneOf(("nested", "flat"))] = _CORE.notification_shape
    detach_after_create: bool = _CORE.detach_after_create
    # Put each message's event id in _meta["io.github.mcp-resume-proxy/eventId"] (opt-in;
    # for transports without SSE ids, where it is what lastEventId names).
    event_id_in_meta: bool = _CORE.event_id_in_meta
    # HMAC key for resume tokens; else MCP_RESUME_PROXY_TOKEN_SECRET; else random per start.
    token_secret: str | None = None


@dataclass(frozen=True)
class StoreConfig:
    """Where streams live (docs/stores.md). memory: this process only; sqlite: survives a
    restart; redis: shared by replicas. Persistent stores need streams.token_secret."""

    kind: Annotated[str, OneOf(("memory", "sqlite", "redis"))] = "memory"
    # sqlite: the database file (created if missing; one proxy per file).
    path: str = "mcp-resume-proxy.db"
    # sqlite: "normal" survives a crash or SIGKILL of the proxy; "full" also power loss.
    synchronous: Annotated[str, OneOf(("normal", "full"))] = "normal"
    # redis: a Redis >= 7 or Valkey server.
    url: str = "redis://127.0.0.1:6379/0"
    # redis: every key is prefixed with it: one namespace per deployment.
    namespace: str = "mcp-resume-proxy"
    # redis: url names a node of a Redis Cluster (the others are discovered from it);
    # the start fails when this and the server's cluster_enabled disagree.
    cluster: bool = False
    # redis: a replica that has not renewed its lease for this long is dead: its
    # sessions end (404) and its live streams end with data.reason owner_lost.
    lease_seconds: Annotated[float, Positive] = 10.0
    # sqlite, redis: a client's request that finds the store not answering retries for
    # this long, then gets 503 store_unavailable (with Retry-After), never a 500.
    unavailable_wait_seconds: Annotated[float, NonNegative] = 5.0
    # memory, sqlite: how often expired records (completed streams past their retention,
    # a dropped stream's leftovers, tasks past their ttl) are deleted, a bounded piece a
    # loop turn; until then they are absent to every read but take room. redis: its TTLs.
    sweep_seconds: Annotated[float, Positive] = 60.0


@dataclass(frozen=True)
class PoolConfig:
    """The upstream sessions that serve modern (2026-07-28) clients (docs/modern.md)."""

    # shared: requests are multiplexed onto up to `size` initialized upstream sessions
    # (ids rewritten; a call prefers a session with nothing else in flight).
    # per_request: every modern request gets a fresh upstream session, stopped after it.
    isolation: Annotated[str, OneOf(("shared", "per_request"))] = "shared"
    size: Annotated[int, Bound(1, 1024)] = 4
    # A call that may ask the client something (tools/call, prompts/get, resources/read),
    # from a client that declared elicitation, sampling or roots, gets a session where no
    # other such call runs, so that a stdio server's question is never ambiguous: the
    # pool grows past `size` for them, up to this many sessions.
    max_size: Annotated[int, Bound(1, 4096)] = 32
    # A pooled session with nothing in flight for this long is stopped (the pool keeps
    # at least one warm, and the spares).
    idle_seconds: Annotated[float, Positive] = 300.0
    # Sessions kept started and idle besides the one a call takes, so that a call does
    # not wait for a server to start; within size (max_size for asking calls). 0: none.
    spare: Annotated[int, Bound(0, 64)] = 1


@dataclass(frozen=True)
class ModernConfig:
    """MCP 2026-07-28 clients on the same endpoint, served statelessly."""

    enabled: bool = True
    # The era a client that speaks both is served, for every server that does not set its
    # own dual_era: modern, or legacy (its server/discover is refused with -32022 so that it
    # falls back to initialize, and resumes with Last-Event-ID; docs/modern.md).
    dual_era: Annotated[str, OneOf(DUAL_ERA_CHOICES)] = "modern"
    pool: PoolConfig = field(default_factory=PoolConfig)
    # How long a call that answered with input_required (MRTR) waits for the client's
    # retry before it is cancelled upstream.
    input_ttl_seconds: Annotated[float, Positive] = 300.0
    # ttlMs on cacheable results (lists, resources/read, server/discover); cacheScope
    # is always "private" (the proxy cannot know what the upstream's data depends on).
    cache_ttl_ms: Annotated[int, NonNegative] = 0
    # Modern requests running or waiting for input at once, tasks included; past it a new
    # one gets 503 (too_many_calls).
    max_calls: Annotated[int, Positive] = 10_000


@dataclass(frozen=True)
class TasksConfig:
    """Durable work for clients that declare the Tasks extension (docs/modern.md)."""

    enabled: bool = True
    # always: every tools/call of a declaring client becomes a task; never: none does;
    # after_ms: a call that has not answered within after_ms becomes one.
    mode: Annotated[str, OneOf(("always", "never", "after_ms"))] = "after_ms"
    after_ms: Annotated[int, NonNegative] = 1000
    # A task's record lives this long after its creation (ttlMs); then tasks/get says
    # it is unknown, and a call still running is cancelled.
    ttl_seconds: Annotated[float, Positive] = 3600.0
    poll_interval_ms: Annotated[int, Positive] = 1000
    # Tasks running at once in this process; past it a call a client declared tasks for
    # stays a plain call (a tool that requires a task gets 503 too_many_tasks).
    max_running: Annotated[int, Positive] = 1000


@dataclass(frozen=True)
class LogConfig:
    format: Annotated[str, OneOf(("console", "json"))] = "console"
    level: Annotated[str, OneOf(("debug", "info", "warning", "error"))] = "info"


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
                _check_upstream(server, f"servers.{name}")
                where = f"servers.{name}"
                if not server.configured and not problems.names(f"{where}.command", f"{where}.url"):
                    raise ConfigError(f"{where}: give a command (stdio) or a url")
    else:
        with problems.collecting():
            _check_upstream(config.upstream, "upstream")
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


def _check_upstream(up: UpstreamConfig, where: str) -> None:
    unfit = env_problems(up.env, where)
    if unfit:
        raise ConfigError(*unfit)
    if up.url and up.command:
        raise ConfigError(f"{where}: give either command (stdio) or url, not both")
    if up.url is not None:
        scheme = up.url.partition("://")[0].lower()
        if scheme not in ("http", "https", "ws", "wss") or "://" not in up.url:
            raise ConfigError(
                f"{where}.url: expected an http(s):// or ws(s):// URL, got {shown_url(up.url)!r}"
            )
        if up.transport == "stdio":
            raise ConfigError(f"{where}.transport: stdio needs {where}.command, not a url")
    elif up.transport not in ("auto", "stdio"):
        raise ConfigError(f"{where}.transport: {up.transport} needs {where}.url")
    check_oauth(up.oauth, up.kind, where)
    check_policy(up, where)


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
