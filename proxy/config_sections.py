"""The proxy's own sections of the config (listen, sse, sessions, streams, store, modern,
tasks, log): each key with its bound on its field and its default, the session's knobs
taking theirs from :class:`~proxy.core.session.SessionSettings`. Part of the schema rooted
at :class:`proxy.config.Config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from proxy.config_rules import Bound, NonNegative, OneOf, Positive
from proxy.core.dual_era import DUAL_ERA_CHOICES
from proxy.core.httprules import LOCAL_HOSTNAMES
from proxy.core.session import SessionSettings

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
