"""The reference ``stream/poll`` summary: what the incremental summary kept by
:class:`proxy.core.stream.StreamLog` must equal, computed the slow way (every pending
payload parsed). Used by tests/core/test_stream.py and tests/core/test_resume_poll.py."""

from __future__ import annotations

import json


def full_parse_summary(pending: list[bytes]) -> dict[str, bool]:
    """What ``stream/poll`` answered before it was kept incrementally: parse every payload."""
    any_pending = has_request = has_error = False
    for payload in pending:
        any_pending = True
        msg = json.loads(payload)
        if "method" in msg and "id" in msg:
            has_request = True
        result = msg.get("result")
        if "error" in msg or (isinstance(result, dict) and result.get("isError") is True):
            has_error = True
    return {"pendingMessages": any_pending, "hasRequest": has_request, "hasError": has_error}
