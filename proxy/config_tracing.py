"""The ``tracing:`` section (docs/tracing.md): OpenTelemetry traces, exported over
OTLP/HTTP. Every key left null falls back to the standard ``OTEL_*`` environment
variable of the OpenTelemetry SDK, so a deployment that already sets them needs no key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from proxy.config_rules import Bound

_ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


@dataclass(frozen=True)
class TracingConfig:
    # Trace every client request (a span each, children for the upstream exchange, resumes,
    # tasks, store commits, forwards) and pass the context on to the server. null: on when
    # OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set and neither
    # OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none; false: off whatever they say.
    enabled: bool | None = None
    # The OTLP/HTTP traces URL, e.g. http://collector:4318/v1/traces. null: the OTEL_*
    # variables, else http://localhost:4318/v1/traces.
    endpoint: str | None = None
    # The spans' service.name. null: OTEL_SERVICE_NAME, else "mcp-resume-proxy".
    service_name: str | None = None
    # The share of new traces kept (a trace the client started is kept or dropped as the
    # client decided). null: OTEL_TRACES_SAMPLER (and _ARG), else every trace.
    sample_ratio: Annotated[float | None, Bound(0, 1)] = None

    def on(self, environ: Mapping[str, str]) -> bool:
        """Whether this process traces, given its environment."""
        if self.enabled is not None:
            return self.enabled
        if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return False
        if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
            return False
        return any(environ.get(name) for name in _ENDPOINT_VARS)
