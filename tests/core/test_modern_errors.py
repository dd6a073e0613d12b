"""A legacy server's error codes in 2026-07-28 terms for modern clients
(proxy/core/modern_errors.py), in a call's answer and a task's record: pure."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core import jsonrpc
from proxy.core.call import Call
from proxy.core.era import ModernRequest
from proxy.core.modern_errors import MODERN_CODES, modern_error
from proxy.core.modern_results import final_answer
from proxy.core.taskrecord import new_record, refresh

NOT_FOUND_2025 = {"code": -32002, "message": "Resource not found", "data": {"uri": "x://a"}}


def test_the_table_holds_only_what_2026_07_28_renumbers() -> None:
    # basic/index.mdx §Error Codes: -32002 "replaced by -32602"; -32042 has no code in
    # 2026-07-28 (an input_required result takes its place), so it is not a code to map.
    assert MODERN_CODES == {-32002: -32602}


def test_resource_not_found_becomes_invalid_params_keeping_the_servers_code() -> None:
    assert modern_error(NOT_FOUND_2025) == {
        "code": -32602,
        "message": "Resource not found",
        "data": {"uri": "x://a", "upstreamCode": -32002},
    }
    assert modern_error({"code": -32002, "message": "gone"}) == {
        "code": -32602,
        "message": "gone",
        "data": {"upstreamCode": -32002},
    }
    # data that is not an object is the server's, left as it is.
    assert modern_error({"code": -32002, "message": "m", "data": "x://a"}) == {
        "code": -32602,
        "message": "m",
        "data": "x://a",
    }
    assert NOT_FOUND_2025["code"] == -32002  # the input is not changed


@pytest.mark.parametrize(
    "error",
    [
        {"code": -32602, "message": "bad"},
        {"code": -32603, "message": "internal"},
        {"code": -32000, "message": "server", "data": {"reason": "x"}},
        {"code": -32042, "message": "URL elicitation required", "data": {"elicitations": []}},
        {"code": True, "message": "a bool is no code"},
        {"code": "-32002", "message": "a string is no code"},
        {"message": "no code"},
        "not an object",
        None,
    ],
)
def test_everything_else_passes_unchanged(error: Any) -> None:
    assert modern_error(error) == error


def _call() -> Call:
    client = ModernRequest("2026-07-28", {}, None, None, None)
    call = Call("resources/read", {"uri": "x://a"}, client, None)
    call.upstream_id = 1
    return call


def test_a_modern_answer_carries_the_2026_code() -> None:
    call = _call()
    call.respond(jsonrpc.classify({"jsonrpc": "2.0", "id": 1, "error": NOT_FOUND_2025}))
    message, status = final_answer(call, 7, cache_ttl_ms=0, server_info=None)
    assert message["error"]["code"] == -32602 and status == 200
    assert message["error"]["data"] == {"uri": "x://a", "upstreamCode": -32002}


def test_a_modern_task_record_carries_the_2026_code_a_legacy_one_the_servers() -> None:
    for era, code in (("modern", -32602), ("legacy", -32002)):
        call = _call()
        record = new_record("t1", 0.0, 60_000, 500, owner="r1", principal=None, era=era)
        call.fail(dict(NOT_FOUND_2025))
        assert refresh(record, call, 1.0)
        assert record["error"]["code"] == code, era
