"""Task records and the shapes they are shown in, for both eras.

One record per task (a ``tools/call`` the proxy runs as durable work), kept in the store
so that any replica answers ``tasks/get`` and a restarted proxy still knows it. The
record holds the Tasks-extension fields (``io.modelcontextprotocol/tasks``) plus what the
proxy needs: the replica that runs it (``owner``), the principal it belongs to, the
server it runs on, and the era of the client that created it. Shapes:

- :func:`created` — the 2026-07-28 ``CreateTaskResult`` (flat, ``resultType: "task"``);
- :func:`detailed` — the ``tasks/get`` result and ``notifications/tasks`` params
  (``DetailedTask``: ``inputRequests`` / ``result`` / ``error`` by status);
- :func:`legacy_task` — the 2025-11-25 core ``Task`` (``ttl``, ``pollInterval``).

A record whose replica is gone cannot finish any more: :func:`orphaned` turns it into a
``failed`` one with the reason, which is what ``tasks/get`` then shows.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from proxy.core.call import TERMINAL as _CALL_TERMINAL
from proxy.core.call import Call
from proxy.core.errors import LostReason, error_object, lost_error
from proxy.core.modern_errors import modern_error
from proxy.core.protocol import INTERNAL_ERROR, SERVER_ERROR

TERMINAL = frozenset(status.value for status in _CALL_TERMINAL)
_PRIVATE = ("owner", "principal", "era", "server", "expiresAt")


def iso(now: float) -> str:
    """ISO 8601 in UTC with milliseconds, e.g. ``2026-12-03T10:00:00.123Z``."""
    return (
        datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def new_record(
    task_id: str,
    now: float,
    ttl_ms: int,
    poll_ms: int,
    *,
    owner: str,
    principal: str | None,
    era: str,
    server: str = "default",
) -> dict[str, Any]:
    stamp = iso(now)
    return {
        "taskId": task_id,
        "status": "working",
        "createdAt": stamp,
        "lastUpdatedAt": stamp,
        "ttlMs": ttl_ms,
        "pollIntervalMs": poll_ms,
        "owner": owner,
        "principal": principal,
        "era": era,
        "server": server,
        "expiresAt": now + ttl_ms / 1000,
    }


def _task_fields(record: dict[str, Any]) -> dict[str, Any]:
    task: dict[str, Any] = {
        k: record[k]
        for k in ("taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs")
        if k in record
    }
    if record.get("statusMessage"):
        task["statusMessage"] = record["statusMessage"]
    return task


def created(record: dict[str, Any]) -> dict[str, Any]:
    """The ``CreateTaskResult`` a modern client gets in place of the call's result."""
    return {"resultType": "task", **_task_fields(record)}


def detailed(record: dict[str, Any]) -> dict[str, Any]:
    """The ``DetailedTask`` of the record's status (without ``resultType``)."""
    task = _task_fields(record)
    status = record["status"]
    if status == "input_required":
        task["inputRequests"] = record.get("inputRequests", {})
    elif status == "completed":
        task["result"] = record.get("result", {})
    elif status == "failed":
        task["error"] = record.get("error", error_object(SERVER_ERROR, "failed"))
    return task


def legacy_task(record: dict[str, Any]) -> dict[str, Any]:
    """The 2025-11-25 ``Task`` object (``tasks/get``, ``tasks/list``, status notices)."""
    task: dict[str, Any] = {
        "taskId": record["taskId"],
        "status": record["status"],
        "createdAt": record["createdAt"],
        "lastUpdatedAt": record["lastUpdatedAt"],
        "ttl": record.get("ttlMs"),
    }
    if "pollIntervalMs" in record:
        task["pollInterval"] = record["pollIntervalMs"]
    if record.get("statusMessage"):
        task["statusMessage"] = record["statusMessage"]
    if record["status"] == "input_required":
        task["statusMessage"] = task.get("statusMessage") or "waiting for the client's input"
    return task


def public(record: dict[str, Any]) -> dict[str, Any]:
    """The record without the proxy's own fields."""
    return {k: v for k, v in record.items() if k not in _PRIVATE}


def orphaned(record: dict[str, Any], reason: str, message: str, now: float) -> dict[str, Any]:
    """A record whose replica died before it finished: ``failed``, saying why (``reason``:
    a :class:`~proxy.core.errors.LostReason` value, ``owner_lost`` or ``proxy_restarted``)."""
    if record["status"] in TERMINAL:
        return record
    out = {k: v for k, v in record.items() if k != "inputRequests"}
    out.update(
        status="failed",
        statusMessage=message,
        lastUpdatedAt=iso(now),
        error=lost_error(LostReason(reason), message),
    )
    return out


RELATED_TASK = "io.modelcontextprotocol/related-task"


def refresh(record: dict[str, Any], call: Call, now: float) -> bool:
    """Bring the record of ``call``'s task up to date with the call; True when a client of
    the task would see the change (status, or how many questions), not progress alone."""
    before = (record["status"], len(record.get("inputRequests") or {}))
    status = call.status.value
    record["status"] = status
    record["lastUpdatedAt"] = iso(now)
    for key in ("inputRequests", "result", "error"):
        record.pop(key, None)
    if call.status_message:
        record["statusMessage"] = call.status_message
    outcome = call.outcome or {}
    if status == "input_required":
        record["inputRequests"] = call.input_requests()
    elif status == "completed":
        result = dict(outcome.get("result") or {})
        if record["era"] == "modern":
            result.setdefault("resultType", "complete")
            meta = result.get("_meta")
            if isinstance(meta, dict) and RELATED_TASK in meta:  # a legacy server's own
                rest = {k: v for k, v in meta.items() if k != RELATED_TASK}
                if rest:
                    result["_meta"] = rest
                else:
                    del result["_meta"]
        record["result"] = result
    elif status == "failed":
        error = outcome.get("error") or error_object(INTERNAL_ERROR, "failed")
        record["error"] = modern_error(error) if record["era"] == "modern" else error
    return (record["status"], len(record.get("inputRequests") or {})) != before or call.done


def may_be_orphaned(record: dict[str, Any], owner: str) -> bool:
    """A running task another replica (or an earlier process) owns: is its owner alive?"""
    return record["status"] not in TERMINAL and record.get("owner") != owner


def orphaned_by(record: dict[str, Any], *, shared: bool, now: float) -> dict[str, Any]:
    """The record of a task whose owner is gone: with a shared store, a dead replica
    (``owner_lost``); with a file, a restart of the proxy (``proxy_restarted``)."""
    if shared:
        return orphaned(record, "owner_lost", "the proxy replica running this task is gone", now)
    return orphaned(record, "proxy_restarted", "the proxy restarted while this task ran", now)
