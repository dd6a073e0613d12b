"""The OpenTelemetry side of :mod:`proxy.tracing`: the provider, the OTLP/HTTP exporter,
and every span the proxy makes. Loaded only when tracing is on.

Conventions: the OpenTelemetry semantic conventions for MCP (``semantic-conventions-genai``
v0.1.0, the MCP conventions that semconv v1.39 moved there; status Development):
``mcp.method.name``, ``mcp.session.id``, ``mcp.protocol.version``, ``mcp.resource.uri``,
``jsonrpc.request.id``, ``gen_ai.tool.name``, ``gen_ai.prompt.name``,
``gen_ai.operation.name``, ``rpc.response.status_code`` (the JSON-RPC error code) and
``error.type``; span names ``{mcp.method.name} {target}``; a SERVER span for what a client
asks, a CLIENT span for what the proxy asks the server, and W3C Trace Context in
``params._meta`` (and, to an HTTP server, in the ``traceparent`` header). What those
conventions do not name is under ``mcp_proxy.*`` (docs/tracing.md lists every key).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Link, Span, SpanKind, StatusCode

from proxy import __version__
from proxy.config_tracing import TracingConfig
from proxy.core.era import is_modern
from proxy.core.errors import ProxyError
from proxy.core.jsonrpc import Kind, Message
from proxy.tracing.names import (
    ERA,
    ERROR_TYPE,
    FORWARD_KIND,
    FORWARD_TO,
    LAST_EVENT_ID,
    OUTCOME,
    PRINCIPAL,
    REPLAYED,
    SERVER,
    SESSION,
    STATUS_CODE,
    STREAM,
    cut,
    request_attributes,
    span_name,
)

T = TypeVar("T")

_TRACE_KEYS = ("traceparent", "tracestate")
SERVICE_NAME = "mcp-resume-proxy"


def carrier_of(source: Mapping[str, Any] | None) -> dict[str, str]:
    """The W3C Trace Context fields of a header map or a ``_meta`` object (strings only)."""
    if not source:
        return {}
    found = {}
    for key in _TRACE_KEYS:
        value = source.get(key)
        if isinstance(value, str):
            found[key] = value
    return found


def _extracted(source: Mapping[str, Any] | None) -> otel_context.Context | None:
    carrier = carrier_of(source)
    if "traceparent" not in carrier:
        return None
    ctx = propagate.extract(carrier)
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def _meta_of(msg: Message) -> Mapping[str, Any] | None:
    params = msg.raw.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta if isinstance(meta, dict) else None


@contextlib.contextmanager
def _current(span: Span) -> Iterator[Span]:
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        yield span
    finally:
        otel_context.detach(token)


def _failed(span: Span, error_type: str, message: str | None = None) -> None:
    span.set_attribute(ERROR_TYPE, error_type)
    span.set_status(StatusCode.ERROR, message)


def _answer_outcome(span: Span, msg: Message) -> None:
    """Record a JSON-RPC response's outcome on ``span``: its error code, or a tool's
    ``isError`` (MCP conventions: ``error.type`` ``tool_error``)."""
    if not span.is_recording():
        return
    error = msg.raw.get("error")
    if isinstance(error, dict):
        code = str(error.get("code"))
        span.set_attribute(STATUS_CODE, code)
        span.set_attribute(OUTCOME, "error")
        _failed(span, code, str(error.get("message", ""))[:200])
        return
    result = msg.raw.get("result")
    if isinstance(result, dict) and result.get("isError") is True:
        span.set_attribute(OUTCOME, "tool_error")
        _failed(span, "tool_error")
    elif isinstance(result, dict) and result.get("resultType") == "input_required":
        span.set_attribute(OUTCOME, "input_required")


class Tracing:
    """The process's tracer provider and its hooks (see :mod:`proxy.tracing`)."""

    def __init__(self, config: TracingConfig, environ: Mapping[str, str]) -> None:
        resource = Resource.create({"service.version": __version__})
        if config.service_name:
            resource = resource.merge(Resource({"service.name": config.service_name}))
        elif str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": SERVICE_NAME}))
        kwargs: dict[str, Any] = {"resource": resource}
        if config.sample_ratio is not None:
            kwargs["sampler"] = ParentBased(TraceIdRatioBased(config.sample_ratio))
        self.provider = TracerProvider(**kwargs)
        exporter = OTLPSpanExporter(endpoint=config.endpoint) if config.endpoint else None
        self.provider.add_span_processor(BatchSpanProcessor(exporter or OTLPSpanExporter()))
        self.tracer = self.provider.get_tracer(SERVICE_NAME, __version__)

    def stop(self, timeout: float) -> None:
        self.provider.force_flush(int(timeout * 1000))
        self.provider.shutdown()

    # ------------------------------------------------------------------ client requests
    def _parent(
        self, headers: Mapping[str, str], msg: Message | None
    ) -> otel_context.Context | None:
        """The client's context: ``params._meta`` first (it names this very request),
        else the HTTP headers."""
        found = _extracted(_meta_of(msg)) if msg is not None else None
        return found if found is not None else _extracted(headers)

    async def client_post(
        self,
        answer: Awaitable[T],
        headers: Mapping[str, str],
        messages: list[Message],
        server: str,
        principal: str | None,
    ) -> T:
        lone = messages[0] if len(messages) == 1 else None
        version = headers.get("MCP-Protocol-Version")
        session = headers.get("Mcp-Session-Id")
        attributes: dict[str, Any] = {SERVER: server, "network.protocol.name": "http"}
        if lone is not None:
            attributes.update(request_attributes(lone, version))
            attributes[ERA] = "modern" if is_modern(lone.raw, version, session) else "legacy"
        else:
            attributes[ERA] = "legacy"  # a batch: 2026-07-28 has none
        if principal is not None:
            attributes[PRINCIPAL] = principal
        if session:
            attributes[SESSION] = cut(session)
        name = span_name(lone) if lone is not None else "batch"
        span = self.tracer.start_span(
            name, self._parent(headers, lone), SpanKind.SERVER, attributes
        )
        retry = lone is not None and attributes[ERA] == "modern" and "requestState" in lone.params
        try:
            with _current(span):
                if not retry:
                    response = await answer
                else:  # an MRTR round: this retry continues a call parked for input
                    responses = lone.params.get("inputResponses") if lone is not None else None
                    count = len(responses) if isinstance(responses, dict) else 0
                    attrs: dict[str, Any] = {"mcp_proxy.mrtr.input_responses": count}
                    with self.tracer.start_as_current_span("mrtr round", attributes=attrs):
                        response = await answer
        except ProxyError as exc:
            code = str(exc.jsonrpc_code)
            span.set_attribute(STATUS_CODE, code)
            span.set_attribute(OUTCOME, exc.reason or "refused")
            span.set_attribute("http.response.status_code", exc.http_status)
            _failed(span, code, exc.message[:200])
            raise
        except BaseException as exc:  # cancelled: the client hung up; else a fault
            gone = isinstance(exc, asyncio.CancelledError | ConnectionError)
            span.set_attribute(OUTCOME, "client_gone" if gone else "error")
            _failed(span, type(exc).__qualname__)
            raise
        else:
            status = getattr(response, "status", None)
            if isinstance(status, int):
                span.set_attribute("http.response.status_code", status)
            new_session = getattr(response, "headers", {}).get("Mcp-Session-Id")
            if new_session and not session:
                span.set_attribute(SESSION, cut(new_session))
            if span.is_recording() and OUTCOME not in getattr(span, "attributes", {}):
                span.set_attribute(OUTCOME, "ok")
            return response
        finally:
            span.end()

    async def client_resume(
        self, answer: Awaitable[T], headers: Mapping[str, str], server: str, principal: str | None
    ) -> T:
        last = headers.get("Last-Event-ID", "")
        attributes: dict[str, Any] = {SERVER: server, ERA: "legacy", LAST_EVENT_ID: last}
        attributes["mcp.method.name"] = "resume"
        parts = last.split(".")
        if len(parts) >= 3 and parts[1].isdigit():
            attributes[STREAM] = int(parts[1])
        session = headers.get("Mcp-Session-Id")
        if session:
            attributes[SESSION] = cut(session)
        if principal is not None:
            attributes[PRINCIPAL] = principal
        span = self.tracer.start_span("resume", _extracted(headers), SpanKind.SERVER, attributes)
        try:
            with _current(span):
                return await answer
        except ProxyError as exc:
            span.set_attribute(OUTCOME, exc.reason or "refused")
            span.set_attribute(STATUS_CODE, str(exc.jsonrpc_code))
            _failed(span, exc.reason or str(exc.jsonrpc_code), exc.message[:200])
            raise
        finally:
            span.end()

    def note(self, attributes: Mapping[str, Any]) -> None:
        span = trace.get_current_span()
        if not span.is_recording():
            return
        for key, value in attributes.items():
            if value is None:
                continue
            name = {"session": SESSION, "stream": STREAM, "replayed": REPLAYED}.get(key, key)
            span.set_attribute(name, cut(value) if name == SESSION else value)

    # ------------------------------------------------------------------ upstream
    def wrap_upstream(self, context: Any, build: Callable[[Any], T]) -> T:
        exchanges = Exchanges(self.tracer, context.on_message, context.on_closed)
        upstream = build(
            dataclasses.replace(
                context,
                on_message=exchanges.on_message,
                on_closed=exchanges.on_closed,
                on_messages=None,  # each answer ends its span: one by one
            )
        )
        inner_send = upstream.send  # type: ignore[attr-defined]

        def send(payload: bytes, handshake: Any = None) -> None:
            inner_send(exchanges.traced(payload), handshake)

        upstream.send = send  # type: ignore[attr-defined]
        return upstream

    def http_headers(self, msg: Message, headers: dict[str, str]) -> None:
        headers.update(carrier_of(_meta_of(msg)))

    # ------------------------------------------------------------------ tasks
    def task_life(self, run: Any, task_id: str, era: str) -> None:
        attributes = {"mcp_proxy.task.id": cut(task_id), ERA: era, "mcp.method.name": run.method}
        span = self.tracer.start_span("task", attributes=attributes)

        def changed(done: Any) -> None:
            if not done.done:
                return
            done.on_change.remove(changed)
            status = getattr(getattr(done.call, "status", None), "value", None)
            span.set_attribute("mcp_proxy.task.status", str(status))
            if status not in (None, "completed"):
                _failed(span, str(status))
            span.end()

        run.on_change.append(changed)

    # ------------------------------------------------------------------ store
    def gather(self, links: list[Any]) -> None:
        span = trace.get_current_span()
        if span.is_recording():
            found = span.get_span_context()
            if found not in links:
                links.append(found)

    def commit(
        self, links: list[Any], events: int, kind: str
    ) -> contextlib.AbstractContextManager[Any]:
        parent = trace.set_span_in_context(trace.NonRecordingSpan(links[0]))
        attributes: dict[str, Any] = {"db.system.name": kind, "mcp_proxy.store.events": events}
        attributes["mcp_proxy.store.requests"] = len(links)
        return self.tracer.start_as_current_span(
            "store commit",
            parent,
            SpanKind.CLIENT,
            attributes,
            links=[Link(c) for c in links[1:32]],
        )

    # ------------------------------------------------------------------ replicas
    @contextlib.contextmanager
    def forward(self, owner: str, request: Any) -> Iterator[dict[str, str]]:
        if not trace.get_current_span().get_span_context().is_valid:
            yield {}  # in no trace: none begins here
            return
        kind = type(request).__name__
        attributes: dict[str, Any] = {FORWARD_TO: cut(owner), FORWARD_KIND: kind}
        with self.tracer.start_as_current_span(
            f"forward {kind}", kind=SpanKind.CLIENT, attributes=attributes
        ):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)
            yield carrier_of(carrier)

    def forwarded(self, message: Mapping[str, Any]) -> contextlib.AbstractContextManager[Any]:
        parent = _extracted(message)
        if parent is None:  # the asker traces nothing: no trace begins here
            return contextlib.nullcontext()
        kind = str(message.get("kind", "?"))
        attributes: dict[str, Any] = {FORWARD_KIND: kind}
        attributes["mcp_proxy.forward.from"] = cut(str(message.get("from")))
        return self.tracer.start_as_current_span(
            f"forwarded {kind}", parent, SpanKind.SERVER, attributes
        )


class Exchanges:
    """One upstream's requests in flight, each with its CLIENT span: started when the
    request is sent within a client request's span, ended by its response."""

    def __init__(self, tracer: trace.Tracer, on_message: Any, on_closed: Any) -> None:
        self.tracer = tracer
        self._on_message = on_message
        self._on_closed = on_closed
        self.open: dict[Any, tuple[Span, Span]] = {}

    def traced(self, payload: bytes) -> bytes:
        """``payload`` as the server gets it: a request sent within a client request's
        span gets a CLIENT span of its own and carries it in ``params._meta``; within a
        trace the sampler left out, the context alone goes on (still not sampled)."""
        parent = trace.get_current_span()
        sampled_out = isinstance(parent, trace.NonRecordingSpan)
        if not (parent.is_recording() or (sampled_out and parent.get_span_context().is_valid)):
            return payload  # the proxy's own request, or a task's later turn
        try:
            data = json.loads(payload)
        except ValueError:
            return payload
        if not isinstance(data, dict) or not isinstance(data.get("method"), str):
            return payload
        params = data.setdefault("params", {})
        if not isinstance(params, dict):
            return payload
        if "id" not in data:
            if data["method"] == "notifications/cancelled":  # no answer will end its span
                self._end(params.get("requestId"), "cancelled")
            return payload
        carrier: dict[str, str] = {}
        if sampled_out:
            propagate.inject(carrier)
        else:
            msg = Message(Kind.REQUEST, data)
            attributes = request_attributes(msg, None)
            span = self.tracer.start_span(
                span_name(msg), kind=SpanKind.CLIENT, attributes=attributes
            )
            propagate.inject(carrier, context=trace.set_span_in_context(span))
            self.open[data["id"]] = (span, parent)
        meta = params.get("_meta")
        params["_meta"] = {**(meta if isinstance(meta, dict) else {}), **carrier}
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()

    def _end(self, request_id: Any, outcome: str) -> None:
        entry = self.open.pop(request_id, None) if isinstance(request_id, int | str) else None
        if entry is not None:
            entry[0].set_attribute(OUTCOME, outcome)
            entry[0].end()

    def on_message(self, msg: Message, origin: int | None = None) -> None:
        entry = self.open.pop(msg.id, None) if msg.kind is Kind.RESPONSE else None
        if entry is None:
            self._on_message(msg, origin)
            return
        span, parent = entry
        _answer_outcome(span, msg)
        _answer_outcome(parent, msg)
        span.end()
        with _current(parent):  # what the answer causes (a store commit) is the request's
            self._on_message(msg, origin)

    def on_closed(self, reason: str) -> None:
        for span, _ in self.open.values():
            span.set_attribute(OUTCOME, "upstream_closed")
            _failed(span, "upstream_closed", reason[:200])
            span.end()
        self.open.clear()
        self._on_closed(reason)
