from __future__ import annotations

import pytest

from proxy.core import seed
from proxy.core.errors import ResumeError
from proxy.core.stream import Mark, Unacknowledged


def test_stream_ids_name_this_sessions_streams_only() -> None:
    assert seed.stream_id_for("ep", 4) == "ep.4"
    assert seed.stream_number_of("ep", "ep.4") == 4
    for other in ("xx.4", "ep.x", "ep.", "4", "ep.4.1", "ep.-4"):
        assert seed.stream_number_of("ep", other) is None


def test_read_ref() -> None:
    ref = seed.read_ref({"streamId": "ep.1", "resumeToken": "t", "lastEventId": "ep.1.3"})
    assert (ref.stream_id, ref.token, ref.last_event_id) == ("ep.1", "t", "ep.1.3")
    with pytest.raises(ResumeError) as info:
        seed.read_ref({"streamId": 5})
    assert info.value.reason == "unknown_stream"


def test_poll_marks_and_result_flags() -> None:
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}
    ask = {"jsonrpc": "2.0", "id": 3, "method": "sampling/createMessage"}
    failed = {"jsonrpc": "2.0", "id": 1, "result": {"isError": True}}
    refused = {"jsonrpc": "2.0", "id": 1, "error": {"code": -1, "message": "no"}}
    fine = {"jsonrpc": "2.0", "id": 1, "result": {"isError": False}}
    assert [seed.poll_mark(m) for m in (progress, ask, failed, refused, fine)] == [
        Mark.NONE,
        Mark.REQUEST,
        Mark.ERROR,
        Mark.ERROR,
        Mark.NONE,
    ]
    assert seed.poll_result("s", False, Unacknowledged(3, 1, 1)) == {
        "streamId": "s",
        "status": "live",
        "pendingMessages": True,
        "hasRequest": True,
        "hasError": True,
    }
    done = seed.poll_result("s", True, Unacknowledged(0, 0, 0))
    assert (done["status"], done["pendingMessages"]) == ("completed", False)


def test_capability_is_removed_and_nothing_else_changes() -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"capabilities": {"streams": {}, "roots": {}}, "protocolVersion": "x"},
    }
    stripped, had = seed.without_streams_capability(init)
    assert had and stripped["params"] == {"capabilities": {"roots": {}}, "protocolVersion": "x"}
    assert init["params"]["capabilities"] == {"streams": {}, "roots": {}}, "input untouched"
    same, had = seed.without_streams_capability({"params": {"capabilities": {}}})
    assert not had
