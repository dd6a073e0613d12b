"""The ``upstream:`` section (and each ``servers.NAME``): one MCP server, how the proxy
reaches it (a stdio command or a URL), and what clients of it are shown and may use; its
own checks (:func:`check_upstream`). Part of the schema rooted at :class:`proxy.config.Config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from proxy.config_oauth import UpstreamOAuthConfig, check_oauth
from proxy.config_policy import NameRulesConfig, ResourceRulesConfig, check_policy
from proxy.config_rules import ConfigError, NonNegative, OneOf, Positive, interpolate, shown_url
from proxy.config_strings import check_header, env_problems
from proxy.core.dual_era import DUAL_ERA_CHOICES

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


def check_upstream(up: UpstreamConfig, where: str) -> None:
    """The rules within one server's section (``where``: its key path)."""
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
