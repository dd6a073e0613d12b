"""The pure parts of the modern façade: era classification, request checks, MRTR state,
task records."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core import reqstate, taskrecord
from proxy.core.era import (
    ModernError,
    check_request,
    decode_header_value,
    is_modern,
    log_wanted,
    upstream_params,
)

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
HEADERS = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "t"}


def call(**params: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "t", "_meta": dict(META), **params},
    }


@pytest.mark.parametrize(
    ("raw", "version", "session", "modern"),
    [
        (call(), "2026-07-28", None, True),
        (call(), None, None, True),  # _meta alone says modern
        (call(), "2025-06-18", "sid", True),  # _meta wins; the session is ignored
        ({"method": "tools/call", "params": {}}, "2026-07-28", None, True),
        ({"method": "tools/call", "params": {}}, "2099-01-01", None, True),  # -32022 later
        ({"method": "tools/call", "params": {}}, "2025-06-18", None, False),
        ({"method": "tools/call", "params": {}}, "2026-07-28", "sid", False),
        ({"method": "tools/call", "params": {}}, None, None, False),
        ({"method": "initialize", "params": {"_meta": dict(META)}}, None, None, True),  # 404
        ({"method": "initialize", "params": {}}, "2026-07-28", None, True),
        ({"method": "initialize", "params": {}}, "2099-01-01", None, False),
        ({"method": "initialize", "params": {}}, None, None, False),
    ],
)
def test_is_modern(raw: dict[str, Any], version: str | None, session: str | None, modern: bool):
    assert is_modern(raw, version, session) is modern


def test_a_valid_request_tells_capabilities_and_log_level() -> None:
    raw = call()
    raw["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = {
        "elicitation": {},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    }
    raw["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = "warning"
    raw["params"]["_meta"]["progressToken"] = 5
    request = check_request(raw, HEADERS)
    assert request.tasks and request.declares("elicitation") and not request.declares("sampling")
    assert request.log_level == "warning" and request.progress_token == 5


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"header": ("MCP-Protocol-Version", None)}, -32020),
        ({"header": ("Mcp-Method", "tools/list")}, -32020),
        ({"header": ("Mcp-Name", None)}, -32020),
        ({"header": ("Mcp-Name", "=?base64?!!!?=")}, -32020),
        ({"meta": ("io.modelcontextprotocol/protocolVersion", "2024-11-05")}, -32022),
        ({"meta": ("io.modelcontextprotocol/protocolVersion", 7)}, -32602),
        ({"meta": ("io.modelcontextprotocol/clientCapabilities", None)}, -32602),
    ],
)
def test_bad_requests_get_the_spec_codes(change: dict[str, Any], code: int) -> None:
    raw = call()
    headers = dict(HEADERS)
    if "header" in change:
        key, value = change["header"]
        if value is None:
            del headers[key]
        else:
            headers[key] = value
    else:
        key, value = change["meta"]
        if value is None:
            del raw["params"]["_meta"][key]
        else:
            raw["params"]["_meta"][key] = value
            headers["MCP-Protocol-Version"] = str(value)
    with pytest.raises(ModernError) as caught:
        check_request(raw, headers)
    assert caught.value.jsonrpc_code == code
    assert caught.value.http_status == 400


def test_unsupported_version_lists_what_is_served() -> None:
    raw = call()
    raw["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "2099-01-01"
    with pytest.raises(ModernError) as caught:
        check_request(raw, {**HEADERS, "MCP-Protocol-Version": "2099-01-01"})
    data = caught.value.to_jsonrpc(1)["error"]["data"]
    assert data["requested"] == "2099-01-01" and "2026-07-28" in data["supported"]


@given(st.text())
def test_base64_sentinel_round_trips(text: str) -> None:
    encoded = "=?base64?" + base64.b64encode(text.encode()).decode() + "?="
    assert decode_header_value(encoded) == text


def test_upstream_params_drop_only_what_the_proxy_reads() -> None:
    params = {
        "name": "t",
        "requestState": "s",
        "inputResponses": {},
        "_meta": {**META, "progressToken": 1, "com.example/x": 2},
    }
    assert upstream_params(params) == {
        "name": "t",
        "_meta": {"progressToken": 1, "com.example/x": 2},
    }
    assert upstream_params({"name": "t", "_meta": dict(META)}) == {"name": "t"}


def test_log_messages_only_when_asked_for_and_at_the_level() -> None:
    assert not log_wanted(None, "error")
    assert log_wanted("warning", "error") and not log_wanted("warning", "info")


# ---------------------------------------------------------------------- requestState
SECRET = b"k" * 32


def test_state_round_trips_and_is_bound() -> None:
    state = reqstate.mint(SECRET, "call-1", "tools/call", "t", None, 100.0)
    assert reqstate.verify(SECRET, state, "tools/call", "t", None, 99.0) == "call-1"
    for method, name, who, now in [
        ("tools/call", "other", None, 99.0),  # another request
        ("prompts/get", "t", None, 99.0),
        ("tools/call", "t", "mallory", 99.0),  # another principal
        ("tools/call", "t", None, 100.5),  # expired
    ]:
        with pytest.raises(ModernError) as caught:
            reqstate.verify(SECRET, state, method, name, who, now)
        assert caught.value.jsonrpc_code == -32602
    with pytest.raises(ModernError):
        reqstate.verify(b"x" * 32, state, "tools/call", "t", None, 99.0)


def test_state_names_its_holder_under_the_mac() -> None:
    state = reqstate.mint(SECRET, "call-1", "tools/call", "t", None, 100.0, holder="a1b2")
    parked = reqstate.read(SECRET, state, "tools/call", "t", None, 99.0)
    assert parked == reqstate.Parked("call-1", "a1b2")
    assert reqstate.served_here(parked, "a1b2") and not reqstate.served_here(parked, "c3d4")
    old = reqstate.mint(SECRET, "c", "m", "n", None, 9.0)
    unnamed = reqstate.read(SECRET, old, "m", "n", None, 1.0)
    assert unnamed.holder is None and reqstate.served_here(unnamed, "c3d4")


@given(st.data())
def test_any_change_to_a_state_is_refused(data: st.DataObject) -> None:
    state = reqstate.mint(SECRET, "call-1", "tools/call", "t", None, 100.0)
    index = data.draw(st.integers(0, len(state) - 1))
    replacement = data.draw(st.characters(codec="ascii"))
    changed = state[:index] + replacement + state[index + 1 :]
    if changed == state:
        return
    try:
        got = reqstate.verify(SECRET, changed, "tools/call", "t", None, 99.0)
    except ModernError as exc:
        assert exc.jsonrpc_code == -32602
    else:  # base64 padding bits may decode alike: then it must be the same state
        assert got == "call-1"


@given(st.one_of(st.none(), st.integers(), st.text(), st.binary().map(repr)))
def test_garbage_states_are_refused_with_32602(garbage: object) -> None:
    with pytest.raises(ModernError) as caught:
        reqstate.verify(SECRET, garbage, "tools/call", "t", None, 0.0)
    assert caught.value.jsonrpc_code == -32602


# ---------------------------------------------------------------------- task records
def test_task_shapes_for_both_eras() -> None:
    record = taskrecord.new_record(
        "tid", 1_700_000_000.0, 60_000, 500, owner="o", principal=None, era="modern"
    )
    assert record["createdAt"] == "2023-11-14T22:13:20.000Z"
    created = taskrecord.created(record)
    assert created == {
        "resultType": "task",
        "taskId": "tid",
        "status": "working",
        "createdAt": record["createdAt"],
        "lastUpdatedAt": record["createdAt"],
        "ttlMs": 60_000,
        "pollIntervalMs": 500,
    }
    record.update(status="input_required", inputRequests={"k": {"method": "roots/list"}})
    assert taskrecord.detailed(record)["inputRequests"] == {"k": {"method": "roots/list"}}
    record.update(status="completed", result={"content": []})
    assert taskrecord.detailed(record)["result"] == {"content": []}
    assert "inputRequests" not in taskrecord.detailed(record)
    legacy = taskrecord.legacy_task(record)
    assert legacy["ttl"] == 60_000 and legacy["pollInterval"] == 500
    assert "owner" not in taskrecord.public(record)


def test_an_orphaned_running_task_reads_as_failed() -> None:
    record = taskrecord.new_record("t", 0.0, 1000, 100, owner="o", principal=None, era="modern")
    failed = taskrecord.orphaned(record, "proxy_restarted", "restarted", 5.0)
    assert failed["status"] == "failed"
    assert failed["error"]["data"] == {"reason": "proxy_restarted"}
    done = dict(record, status="completed")
    assert taskrecord.orphaned(done, "x", "y", 5.0) is done
