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

from proxy.core.errors import LostReason, error_object, lost_error
from proxy.core.protocol import SERVER_ERROR

TERMINAL = frozenset({"completed", "failed", "cancelled"})
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
