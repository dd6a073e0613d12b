"""Span names and attribute keys (docs/tracing.md): the MCP semantic conventions'
(``semantic-conventions-genai`` v0.1.0) where they name one, ``mcp_proxy.*`` otherwise.
Pure: no OpenTelemetry import."""

from __future__ import annotations

from typing import Any

from proxy.core.jsonrpc import Kind, Message

METHOD = "mcp.method.name"
SESSION = "mcp.session.id"
PROTOCOL_VERSION = "mcp.protocol.version"
RESOURCE_URI = "mcp.resource.uri"
REQUEST_ID = "jsonrpc.request.id"
TOOL = "gen_ai.tool.name"
PROMPT = "gen_ai.prompt.name"
OPERATION = "gen_ai.operation.name"
STATUS_CODE = "rpc.response.status_code"  # the JSON-RPC error code, as a string
ERROR_TYPE = "error.type"
PRINCIPAL = "user.id"  # the principal inbound auth found (its name, never a token)

SERVER = "mcp_proxy.server"  # the server's name in the config
ERA = "mcp_proxy.era"  # legacy (sessions) or modern (2026-07-28)
OUTCOME = "mcp_proxy.outcome"
STREAM = "mcp_proxy.stream"  # the stream's number in its session, as /status shows it
LAST_EVENT_ID = "mcp_proxy.resume.last_event_id"
REPLAYED = "mcp_proxy.resume.replayed"
FORWARD_TO = "mcp_proxy.forward.to"
FORWARD_KIND = "mcp_proxy.forward.kind"

ID_PREFIX = 8  # as /status and the logs cut session and task ids: they are bearer secrets


def cut(value: Any) -> str:
    return str(value)[:ID_PREFIX]


def target_of(msg: Message) -> str | None:
    """The low-cardinality target of a span name: a tool's or a prompt's name."""
    if msg.method in ("tools/call", "prompts/get"):
        name = msg.params.get("name")
        return name if isinstance(name, str) else None
    return None


def span_name(msg: Message) -> str:
    """``{mcp.method.name} {target}`` (MCP conventions: Spans)."""
    method = msg.method or ("response" if msg.kind is Kind.RESPONSE else "unknown")
    target = target_of(msg)
    return f"{method} {target}" if target else method


def request_attributes(msg: Message, version: str | None) -> dict[str, Any]:
    """The MCP conventions' attributes of one message."""
    attributes: dict[str, Any] = {}
    if msg.method is not None:
        attributes[METHOD] = msg.method
    if msg.kind is Kind.REQUEST and msg.id is not None:
        attributes[REQUEST_ID] = str(msg.id)
    if version:
        attributes[PROTOCOL_VERSION] = version
    params = msg.params
    if msg.method == "tools/call":
        attributes[OPERATION] = "execute_tool"
        if isinstance(params.get("name"), str):
            attributes[TOOL] = params["name"]
    elif msg.method == "prompts/get" and isinstance(params.get("name"), str):
        attributes[PROMPT] = params["name"]
    elif msg.method and msg.method.startswith("resources/") and isinstance(params.get("uri"), str):
        attributes[RESOURCE_URI] = params["uri"]
    return attributes
