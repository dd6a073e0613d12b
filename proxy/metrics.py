"""``/metrics``: the process in Prometheus text format, with ``prometheus-client``.

One :class:`Metrics` per process, on a registry of its own (not the library's global
one, so that several apps in one test process never share counters). Names follow the
Prometheus conventions: a ``mcp_resume_proxy_`` prefix, ``_total`` on counters, base
units (seconds, bytes). No label ever names a session, stream or task: the values of
every label are a small fixed set (docs/reference.md §/metrics lists them).

Gauges of what is held right now (sessions, live streams, buffered bytes and events,
the modern side) are read when scraped; counters and histograms are bumped where the
thing happens. Beside them: the process's own ``process_*`` (CPU, memory, descriptors;
Linux) and ``mcp_resume_proxy_build_info``. No ``_created`` series: a counter's start time
is the process's (``process_start_time_seconds``), and 27 more series per scrape say
nothing else.
"""

from __future__ import annotations

import platform
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from proxy import __version__, logs
from proxy.metrics_batch import BatchedHistogram

CONTENT_TYPE = CONTENT_TYPE_LATEST

# The method label: these, else "other" (a client's method names are not ours to count).
KNOWN_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "completion/complete",
        "logging/setLevel",
        "server/discover",
        "subscriptions/listen",
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
        "tasks/result",
        "tasks/list",
        "stream/poll",
        "stream/resume",
    }
)
_REPLAY_EVENTS = (1, 10, 100, 1_000, 10_000, 100_000)
_SECONDS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


def method_label(method: str | None) -> str:
    return method if method in KNOWN_METHODS else "other"


class Metrics:
    def __init__(self) -> None:
        # The library's switch is global: fine, this process has one Metrics.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        ProcessCollector(registry=r)  # process_cpu_seconds_total, _resident_memory_bytes, ...
        prefix = "mcp_resume_proxy_"
        build = Gauge(
            prefix + "build_info",
            "The proxy's version and the Python running it (always 1).",
            ["version", "python"],
            registry=r,
        )
        build.labels(__version__, platform.python_version()).set(1)
        Gauge(
            prefix + "log_lines_dropped",
            "Log lines that could not be written since the start (stderr's reader gone, a "
            "full disk): the proxy goes on without them.",
            registry=r,
        ).set_function(lambda: float(logs.dropped_lines()))
        self.sessions = Gauge(
            prefix + "sessions",
            "Live client sessions (legacy era), by upstream.",
            ["upstream"],
            registry=r,
        )
        self.live_streams = Gauge(
            prefix + "live_streams", "Request streams still receiving events.", registry=r
        )
        self.buffered_bytes = Gauge(
            prefix + "buffered_bytes", "Bytes held by all stream logs together.", registry=r
        )
        self.buffered_events = Gauge(
            prefix + "buffered_events", "Events held by all stream logs together.", registry=r
        )
        self.resumes = Counter(
            prefix + "resumes",
            "Resumes (GET with Last-Event-ID, stream/resume) by outcome: resumed, or the "
            "data.reason of the refusal.",
            ["outcome"],
            registry=r,
        )
        self.replay_events = Histogram(
            prefix + "replay_events",
            "Events handed back by one resume.",
            buckets=_REPLAY_EVENTS,
            registry=r,
        )
        self.replay_seconds = Histogram(
            prefix + "replay_seconds",
            "From a resume to its replay written to the socket.",
            buckets=_SECONDS,
            registry=r,
        )
        self.upstream_starts = Counter(
            prefix + "upstream_starts",
            "Upstream sessions started (a process for stdio), by upstream and by who wanted "
            "it: a client session, or the modern pool.",
            ["upstream", "for"],
            registry=r,
        )
        self.upstream_restarts = Counter(
            prefix + "upstream_restarts",
            "Stdio servers started again for their session after exiting on their own.",
            ["upstream"],
            registry=r,
        )
        self.upstream_idle_stops = Counter(
            prefix + "upstream_idle_stops",
            "Stdio server processes stopped for their session's idleness "
            "(upstream.stop_idle_seconds); the session stays.",
            ["upstream"],
            registry=r,
        )
        self.config_reloads = Counter(
            prefix + "config_reloads",
            "Config reloads (SIGHUP, listen.watch_config), by outcome: applied or refused.",
            ["outcome"],
            registry=r,
        )
        self.upstream_failures = Counter(
            prefix + "upstream_start_failures",
            "Upstream sessions that could not be started or initialized.",
            ["upstream"],
            registry=r,
        )
        self.requests = Histogram(
            prefix + "request_duration_seconds",
            "POSTs to the MCP endpoint, from their headers to their answer's end, by "
            "method and era.",
            ["method", "era"],
            buckets=_SECONDS,
            registry=r,
        )
        self.tasks_ended = Counter(
            prefix + "tasks_ended",
            "Tasks that reached a terminal status, by status.",
            ["status"],
            registry=r,
        )
        self.tasks_running = Gauge(
            prefix + "tasks_running", "Tasks running now, by upstream.", ["upstream"], registry=r
        )
        self.modern_calls = Gauge(
            prefix + "modern_calls",
            "2026-07-28 calls running or waiting for input (tasks included), by upstream.",
            ["upstream"],
            registry=r,
        )
        self.pool_sessions = Gauge(
            prefix + "pool_sessions",
            "Pooled upstream sessions of the modern side, by upstream.",
            ["upstream"],
            registry=r,
        )
        self.event_loop_lag = Gauge(
            prefix + "event_loop_lag_seconds",
            "The largest lag of the event loop sampled in the last 10 s: how late a timer "
            "due every 0.1 s ran (proxy/looplag.py).",
            registry=r,
        )
        self.pool_start_waits = Counter(
            prefix + "pool_start_waits",
            "Modern requests that waited for a pooled server to start (none idle, no spare "
            "ready: see modern.pool.spare), by upstream.",
            ["upstream"],
            registry=r,
        )

        # The children of ``requests``, by (method, era): ``labels()`` per POST showed
        # in the profile (it checks, joins and locks every time); both sets are fixed.
        # Observed in batches (proxy/metrics_batch.py), handed over before each scrape.
        self._request_children: dict[tuple[str, str], BatchedHistogram] = {}

    def request_seconds(self, method: str, era: str) -> BatchedHistogram:
        """``requests``' child for ``method`` (a :func:`method_label`) and ``era``."""
        key = (method, era)
        child = self._request_children.get(key)
        if child is None:
            child = BatchedHistogram(self.requests.labels(method, era))
            self._request_children[key] = child
        return child

    def watch(self, gauge: Gauge, read: Callable[[], float]) -> None:
        """``gauge`` is read from ``read`` when scraped."""
        gauge.set_function(read)

    def render(self) -> bytes:
        for child in list(self._request_children.values()):
            child.flush()
        return generate_latest(self.registry)


def counts(runners: Any) -> tuple[int, int]:
    """(live streams, buffered events) over the sessions ``runners`` yields."""
    live = events = 0
    for runner in runners:
        a, b = runner.session.stream_counts()
        live += a
        events += b
    return live, events
