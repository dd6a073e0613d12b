from __future__ import annotations

import json

import pytest

from proxy.core import seed
from proxy.core.errors import ResumeError


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


def test_poll_result_flags() -> None:
    pending = [
        json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}).encode(),
        json.dumps({"jsonrpc": "2.0", "id": 3, "method": "sampling/createMessage"}).encode(),
        json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"isError": True}}).encode(),
    ]
    assert seed.poll_result("s", False, pending) == {
        "streamId": "s",
        "status": "live",
        "pendingMessages": True,
        "hasRequest": True,
        "hasError": True,
    }
    assert seed.poll_result("s", True, [])["pendingMessages"] is False


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
