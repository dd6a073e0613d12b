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
from proxy.core.errors import LostReason, answer_with_error, error_message, error_object
from proxy.core.jsonrpc import Message
from proxy.core.protocol import SERVER_ERROR

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


# ---------------------------------------------------------------- serving the tasks
REMOTE_METHODS = frozenset({"tasks/get", "tasks/result", "tasks/cancel"})
"""What a replica that does not hold the session serves itself, from the task's record in
the shared store (``tasks/list``, task creation and the client's answers go to the holder,
which keeps the session's tasks: proxy/modern/legacy_remote.py)."""


def task_principal(session_id: str, principal: str | None) -> str:
    """Whose a legacy task is: the session that created it, and (inbound authentication)
    that session's principal, so that a replica that does not hold the session can tell
    from the record alone whether the asker may see it."""
    owner = f"session:{session_id}"
    return owner if principal is None else f"{owner}\0{principal}"


RELATED = "io.modelcontextprotocol/related-task"
ANSWER_PREFIX = "mrp-task:"  # ids of the server's questions sent on a tasks/result stream


def question(task_id: str, key: str, request: dict[str, Any]) -> dict[str, Any]:
    """One question a task's call asks the client, sent on its ``tasks/result`` stream as
    a server→client request whose id names the task and the key (the answer finds both)."""
    params = dict(request.get("params") or {})
    params["_meta"] = {**(params.get("_meta") or {}), RELATED: {"taskId": task_id}}
    return {
        "jsonrpc": "2.0",
        "id": f"{ANSWER_PREFIX}{task_id}:{key}",
        "method": request["method"],
        "params": params,
    }


def answered(response_id: Any) -> tuple[str, str] | None:
    """(task id, key) of the client's answer to a :func:`question`, else None."""
    text = str(response_id)
    if not text.startswith(ANSWER_PREFIX):
        return None
    task_id, _, key = text[len(ANSWER_PREFIX) :].rpartition(":")
    return task_id, key


def final(request_id: Any, record: dict[str, Any]) -> dict[str, Any]:
    """The ``tasks/result`` answer of a finished task: exactly what the call returned (its
    result, or its JSON-RPC error), with the related-task ``_meta``."""
    related = {RELATED: {"taskId": record["taskId"]}}
    status = record["status"]
    if status == "completed":
        result = dict(record.get("result") or {})
        result["_meta"] = {**(result.get("_meta") or {}), **related}
        return jsonrpc.ok_response(request_id, result)
    if status == "failed":
        error = dict(record.get("error") or error_object(SERVER_ERROR, "failed"))
        return answer_with_error(request_id, error)
    data = {"reason": LostReason.TASK_CANCELLED.value, **related}
    return error_message(request_id, SERVER_ERROR, "the task was cancelled", data)
