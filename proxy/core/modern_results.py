"""What a modern (2026-07-28) client is answered, built from what the legacy server said.

- :func:`discover_result` — ``server/discover`` from the upstream's ``InitializeResult``
  (both eras' versions, the Tasks extension when enabled, instructions, serverInfo);
- :func:`shaped` — a result with ``resultType``, cache hints for lists and reads
  (``ttlMs``, ``cacheScope``), and ``_meta`` serverInfo;
- :func:`final_answer` — a call's outcome as the answer to the request that waits on it,
  with the HTTP status the spec gives its error when not streamed (a server's 2025-era
  error code in 2026-07-28 terms: :mod:`proxy.core.modern_errors`);
- :func:`input_required_result` — the MRTR result carrying the server's questions.
"""

from __future__ import annotations

from typing import Any

from proxy.core.call import Call, CallStatus
from proxy.core.era import (
    HEADER_MISMATCH,
    META_SERVER_INFO,
    METHOD_NOT_FOUND,
    MISSING_CAPABILITY,
    SUPPORTED_VERSIONS,
    TASKS_EXTENSION,
    UNSUPPORTED_VERSION,
    missing_capability,
)
from proxy.core.errors import answer_with_error, error_message
from proxy.core.modern_errors import modern_error
from proxy.core.protocol import REQUEST_CANCELLED

CACHEABLE = frozenset(
    {"tools/list", "prompts/list", "resources/list", "resources/templates/list", "resources/read"}
)
# HTTP statuses the spec gives these JSON-RPC errors (basic/transports/streamable-http.mdx).
ERROR_STATUS = {
    METHOD_NOT_FOUND: 404,
    HEADER_MISMATCH: 400,
    MISSING_CAPABILITY: 400,
    UNSUPPORTED_VERSION: 400,
}


def discover_result(
    init: dict[str, Any], *, tasks_enabled: bool, cache_ttl_ms: int
) -> dict[str, Any]:
    capabilities = {k: v for k, v in (init.get("capabilities") or {}).items() if k != "tasks"}
    if tasks_enabled:
        extensions = dict(capabilities.get("extensions") or {})
        extensions[TASKS_EXTENSION] = {}
        capabilities["extensions"] = extensions
    result: dict[str, Any] = {
        "resultType": "complete",
        "supportedVersions": list(SUPPORTED_VERSIONS),
        "capabilities": capabilities,
        "ttlMs": cache_ttl_ms,
        "cacheScope": "private",
    }
    if isinstance(init.get("instructions"), str):
        result["instructions"] = init["instructions"]
    if isinstance(init.get("serverInfo"), dict):
        result["_meta"] = {META_SERVER_INFO: init["serverInfo"]}
    return result


def shaped(
    method: str, message: dict[str, Any], *, cache_ttl_ms: int, server_info: Any
) -> dict[str, Any]:
    """The upstream's answer as a modern result: resultType, cache hints, serverInfo."""
    result = message.get("result")
    if not isinstance(result, dict):
        return message
    out = dict(result)
    out.setdefault("resultType", "complete")
    if method in CACHEABLE:
        out.setdefault("ttlMs", cache_ttl_ms)
        out.setdefault("cacheScope", "private")
    if isinstance(server_info, dict):
        meta = dict(out.get("_meta") or {})
        meta.setdefault(META_SERVER_INFO, server_info)
        out["_meta"] = meta
    return {"jsonrpc": "2.0", "id": message.get("id"), "result": out}


def final_answer(
    call: Call, request_id: Any, *, cache_ttl_ms: int, server_info: Any
) -> tuple[dict[str, Any], int]:
    """The answer to the request waiting on the ended ``call``, and its HTTP status."""
    outcome = dict(call.outcome or {})
    outcome["id"] = request_id
    if "error" in outcome and call.refused:
        # The server could not do without what the client did not declare.
        what = ", ".join(sorted(call.refused))
        outcome["error"] = missing_capability(dict(call.refused), what).to_jsonrpc()["error"]
    if "error" in outcome:
        error = modern_error(outcome["error"])  # 2025-era codes in 2026-07-28 terms
        code = error.get("code") if isinstance(error, dict) else None
        status = ERROR_STATUS.get(code, 200) if isinstance(code, int) else 200
        return answer_with_error(request_id, error), status
    if call.status is CallStatus.CANCELLED:
        message = call.status_message or "request cancelled"
        return error_message(request_id, REQUEST_CANCELLED, message), 200
    return shaped(call.method, outcome, cache_ttl_ms=cache_ttl_ms, server_info=server_info), 200


def input_required_result(call: Call, request_state: str) -> dict[str, Any]:
    return {
        "resultType": "input_required",
        "inputRequests": call.input_requests(),
        "requestState": request_state,
    }
