"""The 2025-11-25 Tasks shape offered to legacy clients, in the handshake and in lists.

A legacy client that declares ``capabilities.tasks`` at ``initialize`` may run
``tools/call`` as a task when the server says it can (2025-11-25
``basic/utilities/tasks.mdx``). A legacy server usually cannot; the proxy can (it runs
the call on its pooled upstream sessions and keeps the task's record:
``proxy/modern/legacy_tasks.py``). So the proxy adds to the server's ``InitializeResult``
``capabilities.tasks = {list, cancel, requests.tools.call}`` and marks every listed tool
``execution.taskSupport: "optional"`` (tools that say otherwise keep their word). A server
that declares ``tasks`` itself is left alone: its own tasks are passed through.
"""

from __future__ import annotations

from typing import Any

from proxy.core import jsonrpc
from proxy.core.jsonrpc import Message

TASKS_CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


def client_capabilities(initialize: dict[str, Any]) -> dict[str, Any]:
    params = initialize.get("params")
    caps = params.get("capabilities") if isinstance(params, dict) else None
    return dict(caps) if isinstance(caps, dict) else {}


def offer_tasks(msg: Message) -> tuple[Message, bool]:
    """The server's InitializeResult with the proxy's tasks capability, and whether the
    proxy serves tasks (False: the server has its own)."""
    result = msg.raw.get("result")
    if not isinstance(result, dict):
        return msg, False
    caps = result.get("capabilities")
    caps = dict(caps) if isinstance(caps, dict) else {}
    if "tasks" in caps:
        return msg, False
    caps["tasks"] = TASKS_CAPABILITY
    raw = {**msg.raw, "result": {**result, "capabilities": caps}}
    return jsonrpc.classify(raw), True


def tools_may_be_tasks(msg: Message) -> Message:
    """A ``tools/list`` result whose tools may each be called as a task."""
    result = msg.raw.get("result")
    if not isinstance(result, dict) or not isinstance(result.get("tools"), list):
        return msg
    tools = result["tools"]
    marked = []
    for tool in tools:
        if isinstance(tool, dict) and "execution" not in tool:
            tool = {**tool, "execution": {"taskSupport": "optional"}}
        marked.append(tool)
    return jsonrpc.classify({**msg.raw, "result": {**result, "tools": marked}})
