"""A legacy server's -32042 "URL elicitation required" as an ``input_required`` round for
a modern client that declared URL elicitation (proxy/core/url_elicit.py), and what the
client's answers do to the call that waits on them (proxy/core/call.py): pure."""

from __future__ import annotations

from typing import Any

from proxy.core import jsonrpc
from proxy.core.call import URL_CANCELLED, URL_DECLINED, Call, CallStatus
from proxy.core.era import ModernRequest
from proxy.core.follow import Answer, AskUrl, Follower
from proxy.core.modern_results import final_answer, input_required_result
from proxy.core.url_elicit import MAX_URL_ROUNDS, url_round

URL_MODE = {"elicitation": {"form": {}, "url": {}}}
ELICITATION = {
    "mode": "url",
    "elicitationId": "auth-1",
    "url": "https://example.com/connect",
    "message": "Connect first.",
}
PARAMS = {"name": "connect", "arguments": {"a": 1}}


def ended(
    error: dict[str, Any], caps: dict[str, Any] = URL_MODE, method: str = "tools/call"
) -> Call:
    call = Call(method, PARAMS, ModernRequest("2026-07-28", caps, None, None, None), "alice")
    call.upstream_id = 7
    call.respond(jsonrpc.classify({"jsonrpc": "2.0", "id": 7, "error": error}))
    return call


def required(*elicitations: dict[str, Any]) -> dict[str, Any]:
    data = {"elicitations": list(elicitations or [ELICITATION])}
    return {"code": -32042, "message": "URL elicitation required", "data": data}


def test_minus_32042_becomes_one_url_input_request_per_elicitation() -> None:
    second = {**ELICITATION, "elicitationId": "auth-2", "url": "https://example.com/pay"}
    call = ended(required(ELICITATION, second))
    step = Follower("tools/call", None).decide(call, 0.0, gone=False, keepalive_in=10.0)
    assert isinstance(step, AskUrl)
    again = step.call
    assert (again.method, again.params, again.principal) == ("tools/call", PARAMS, "alice")
    assert again.status is CallStatus.INPUT_REQUIRED and again.unsent is False
    # 2026-07-28 ElicitRequestURLParams is mode, message, url; the legacy id names the key.
    assert input_required_result(again, "S")["inputRequests"] == {
        "auth-1": {
            "method": "elicitation/create",
            "params": {
                "mode": "url",
                "message": "Connect first.",
                "url": "https://example.com/connect",
            },
        },
        "auth-2": {
            "method": "elicitation/create",
            "params": {
                "mode": "url",
                "message": "Connect first.",
                "url": "https://example.com/pay",
            },
        },
    }


def test_accepting_them_all_makes_the_request_due_again_and_nothing_goes_upstream() -> None:
    again = url_round(ended(required(ELICITATION, {**ELICITATION, "elicitationId": "b"})))
    assert again is not None
    assert again.answer({"auth-1": {"action": "accept"}}) == (True, [])
    assert again.unsent is False  # one still pending: asked again
    assert list(again.input_requests()) == ["b"]
    assert again.answer({"b": "not an object", "other": {"action": "accept"}}) == (True, [])
    assert list(again.input_requests()) == ["b"]
    assert again.answer({"b": {"action": "accept"}}) == (True, [])
    assert again.unsent and again.status is CallStatus.WORKING
    again.upstream_id = 9  # sent (the table numbers it)
    assert again.unsent is False


def test_a_declined_or_dismissed_url_elicitation_ends_the_call_with_a_2026_error() -> None:
    for action, reason in [("decline", URL_DECLINED), ("cancel", URL_CANCELLED)]:
        again = url_round(ended(required()))
        assert again is not None
        assert again.answer({"auth-1": {"action": action}}) == (True, [])
        assert again.status is CallStatus.FAILED
        assert (
            Follower("tools/call", None).decide(again, 0.0, gone=False, keepalive_in=1) == Answer()
        )
        message, status = final_answer(again, 5, cache_ttl_ms=0, server_info=None)
        assert status == 200
        error = message["error"]
        assert error["code"] == -32000
        assert error["data"] == {
            "reason": reason,
            "upstreamCode": -32042,
            "url": "https://example.com/connect",
        }


def test_rounds_are_bounded_then_the_error_passes_through() -> None:
    call = ended(required())
    for _ in range(MAX_URL_ROUNDS):
        again = url_round(call)
        assert again is not None
        again.answer({"auth-1": {"action": "accept"}})
        again.upstream_id = 3
        again.respond(jsonrpc.classify({"jsonrpc": "2.0", "id": 3, "error": required()}))
        call = again
    assert call.url_rounds == MAX_URL_ROUNDS
    assert url_round(call) is None
    message, _ = final_answer(call, 1, cache_ttl_ms=0, server_info=None)
    assert message["error"]["code"] == -32042


def test_not_translated_without_url_mode_or_for_other_errors() -> None:
    # client/elicitation.mdx §Capabilities: an empty elicitation object means form only.
    for caps in [{}, {"elicitation": {}}, {"elicitation": {"form": {}}}]:
        assert url_round(ended(required(), caps)) is None
    assert url_round(ended(required(), method="tools/list")) is None  # cannot carry input
    assert url_round(ended({"code": -32000, "message": "no"})) is None
    for bad in [
        {"code": -32042, "message": "m"},
        {"code": -32042, "message": "m", "data": {"elicitations": []}},
        required({"mode": "form", "message": "m", "url": "https://x"}),
        required({"mode": "url", "message": "m"}),
        required({**ELICITATION, "message": 3}),
    ]:
        assert url_round(ended(bad)) is None
    call = ended(required())
    call.task_id = "t"  # a task's record keeps the server's error
    assert url_round(call) is None
