"""A real OTLP/HTTP trace receiver for the tracing tests: an aiohttp server on a free
port that decodes each ``ExportTraceServiceRequest`` (protobuf, PyPI ``opentelemetry-proto``)
into plain :class:`Span` values, as a collector would see them."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.support import eventually

KINDS = {1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


@dataclass(frozen=True)
class Span:
    name: str
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    kind: str
    attributes: dict[str, Any]
    status: int  # 0 unset, 1 ok, 2 error
    service: str
    links: tuple[str, ...]  # the span ids linked to


def _value(v: AnyValue) -> Any:
    which = v.WhichOneof("value")
    return getattr(v, which) if which is not None else None


class Receiver:
    """What the proxy exported, in arrival order; :meth:`url` is its traces endpoint."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.requests = 0
        self.url = ""

    async def _export(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf", request.content_type
        decoded = ExportTraceServiceRequest.FromString(await request.read())
        self.requests += 1
        for resource_spans in decoded.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    self.spans.append(
                        Span(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            kind=KINDS.get(s.kind, str(s.kind)),
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            status=s.status.code,
                            service=str(resource.get("service.name")),
                            links=tuple(link.span_id.hex() for link in s.links),
                        )
                    )
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    def named(self, name: str, trace_id: str | None = None) -> list[Span]:
        return [s for s in self.spans if s.name == name and trace_id in (None, s.trace_id)]

    def with_kinds(self, name: str, trace_id: str, *kinds: str) -> list[Span]:
        """The spans :meth:`named` finds once there is one of each of ``kinds`` among
        them, else none: a call's server span and its upstream span may leave in two
        batches, so waiting for the name alone may see only the first."""
        spans = self.named(name, trace_id)
        return spans if set(kinds) <= {s.kind for s in spans} else []

    def children(self, parent: Span) -> list[Span]:
        return [s for s in self.spans if s.parent_id == parent.span_id]

    async def wait_for(self, what: str, found: Callable[[], Any]) -> Any:
        """Wait until ``found()`` is truthy (spans leave in batches); return it."""
        await eventually(lambda: bool(found()), what=what)
        return found()


@contextlib.asynccontextmanager
async def otlp_receiver() -> AsyncIterator[Receiver]:
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver._export)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    receiver.url = f"http://127.0.0.1:{port}/v1/traces"
    try:
        yield receiver
    finally:
        await runner.cleanup()


def tracing_env(receiver: Receiver) -> dict[str, str]:
    """The standard variables that turn tracing on at ``receiver`` (spans out at once)."""
    return {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.url,
        "OTEL_SERVICE_NAME": "proxy-under-test",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    }


def traceparent() -> tuple[str, str, str]:
    """A client's W3C ``traceparent`` (sampled), its trace id and its span id."""
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{trace_id}-{span_id}-01", trace_id, span_id


def call(rid: int, tool: str, **arguments: Any) -> dict[str, Any]:
    """A ``tools/call`` request."""
    params = {"name": tool, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


def one(spans: list[Span]) -> Span:
    assert len(spans) == 1, spans
    return spans[0]
