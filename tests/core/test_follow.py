"""What a modern request's response does next about its call (proxy/core/follow.py), and
what the client is answered (proxy/core/modern_results.py): pure, on a fake clock."""

from __future__ import annotations

from typing import Any

from pytest import approx

from proxy.core import jsonrpc
from proxy.core.call import Call
from proxy.core.era import TASKS_EXTENSION, ModernRequest
from proxy.core.follow import (
    GATHER_MAX_SECONDS,
    GATHER_QUIET_SECONDS,
    LIVENESS_SECONDS,
    Answer,
    AskClient,
    BecomeTask,
    ClientGone,
    Follower,
    Keepalive,
    RefuseInput,
    Wait,
    task_due,
)
from proxy.core.modern_results import (
    discover_result,
    final_answer,
    input_required_result,
    shaped,
)
from tests.core.playbook import ok, req

TASKS = {"extensions": {TASKS_EXTENSION: {}}}
ASKS = {"elicitation": {}}
T0 = 500.0


def attached(method: str = "tools/call", capabilities: dict[str, Any] | None = None) -> Call:
    client = ModernRequest("2026-07-28", capabilities or {}, None, None, None)
    call = Call(method, {"name": "slow"}, client, None)
    call.upstream_id = 1
    return call


def ask(call: Call, rid: str) -> None:
    call.ask(jsonrpc.classify(req(rid, "elicitation/create", {"message": "?"})))


def decide(follower: Follower, call: Call, at: float, **kw: Any) -> Any:
    return follower.decide(call, at, gone=kw.get("gone", False), keepalive_in=kw.get("ka", 10.0))


# ------------------------------------------------------------------ when a call becomes a task
def test_task_due_by_mode() -> None:
    call = attached(capabilities=TASKS)
    common = {"tasks_enabled": True, "after_ms": 400, "tasks_full": False}
    assert task_due(call, T0, mode="after_ms", **common) == T0 + 0.4
    assert task_due(call, T0, mode="always", **common) == T0
    assert task_due(call, T0, mode="never", **common) is None


def test_task_due_never_for_what_cannot_be_a_task() -> None:
    common: dict[str, Any] = {"mode": "always", "after_ms": 0}
    assert task_due(attached(), T0, tasks_enabled=True, tasks_full=False, **common) is None
    listed = attached("tools/list", TASKS)
    assert task_due(listed, T0, tasks_enabled=True, tasks_full=False, **common) is None
    call = attached(capabilities=TASKS)
    assert task_due(call, T0, tasks_enabled=False, tasks_full=False, **common) is None
    assert task_due(call, T0, tasks_enabled=True, tasks_full=True, **common) is None
    call.task_support = "forbidden"
    assert task_due(call, T0, tasks_enabled=True, tasks_full=False, **common) is None


# ------------------------------------------------------------------ the steps
def test_a_working_call_waits_at_most_the_liveness_period() -> None:
    follower = Follower("tools/call", None)
    assert decide(follower, attached(), T0) == Wait(LIVENESS_SECONDS)
    assert decide(follower, attached(), T0, ka=0.2) == Wait(0.2)
    assert decide(follower, attached(), T0, ka=0.0) == Keepalive()


def test_the_task_deadline_comes_first_then_the_client_leaving() -> None:
    follower = Follower("tools/call", T0 + 0.1)
    call = attached()
    assert decide(follower, call, T0) == Wait(approx(0.1))
    assert decide(follower, call, T0 + 0.05, gone=True) == ClientGone()
    assert decide(follower, call, T0 + 0.1, gone=True) == BecomeTask()
    follower.no_task()
    assert decide(follower, call, T0 + 0.2) == Wait(LIVENESS_SECONDS)


def test_an_ended_call_is_answered() -> None:
    call = attached()
    call.respond(jsonrpc.classify(ok(1)))
    assert decide(Follower("tools/call", T0), call, T0, gone=True) == Answer()


def test_questions_are_gathered_until_quiet() -> None:
    follower = Follower("tools/call", None)
    call = attached(capabilities=ASKS)
    ask(call, "s1")
    assert decide(follower, call, T0) == Wait(approx(GATHER_QUIET_SECONDS))
    assert follower.gathering
    ask(call, "s2")  # a second question resets the quiet time
    step = decide(follower, call, T0 + 0.02)
    assert step == Wait(approx(GATHER_QUIET_SECONDS))
    assert decide(follower, call, T0 + 0.02 + GATHER_QUIET_SECONDS) == AskClient()
    assert not follower.gathering


def test_gathering_ends_at_the_max_however_busy_the_server() -> None:
    follower = Follower("tools/call", None)
    call = attached(capabilities=ASKS)
    now, n = T0, 0
    while True:
        n += 1
        ask(call, f"s{n}")
        step = decide(follower, call, now)
        if step == AskClient():
            break
        assert isinstance(step, Wait) and step.seconds <= GATHER_QUIET_SECONDS
        now += GATHER_QUIET_SECONDS / 2
    assert now - T0 >= GATHER_MAX_SECONDS
    assert now - T0 < GATHER_MAX_SECONDS + GATHER_QUIET_SECONDS


def test_a_list_cannot_carry_input_so_its_questions_are_refused() -> None:
    follower = Follower("tools/list", None)
    call = attached("tools/list", ASKS)
    ask(call, "s1")
    assert decide(follower, call, T0) == RefuseInput()


# ------------------------------------------------------------------ results
def test_final_answer_maps_errors_to_their_http_status() -> None:
    call = attached()
    call.respond(
        jsonrpc.classify({"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "x"}})
    )
    message, status = final_answer(call, "c1", cache_ttl_ms=0, server_info=None)
    assert (message, status) == (
        {"jsonrpc": "2.0", "id": "c1", "error": {"code": -32601, "message": "x"}},
        404,
    )


def test_final_answer_names_the_capability_the_server_could_not_do_without() -> None:
    call = attached()
    call.refused = {"sampling": {}}
    call.respond(
        jsonrpc.classify({"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "x"}})
    )
    message, status = final_answer(call, 3, cache_ttl_ms=0, server_info=None)
    assert status == 400
    assert message["error"] == {
        "code": -32021,
        "message": "Missing required client capability: sampling",
        "data": {"requiredCapabilities": {"sampling": {}}},
    }


def test_final_answer_of_a_cancelled_call() -> None:
    call = attached()
    call.cancel("the task expired")
    message, status = final_answer(call, 3, cache_ttl_ms=0, server_info=None)
    assert (message, status) == (
        {"jsonrpc": "2.0", "id": 3, "error": {"code": -32800, "message": "the task expired"}},
        200,
    )


def test_results_are_shaped_with_cache_hints_and_server_info() -> None:
    info = {"name": "legacy", "version": "1"}
    listed = shaped("tools/list", ok(5, {"tools": []}), cache_ttl_ms=60000, server_info=info)
    assert listed == ok(
        5,
        {
            "tools": [],
            "resultType": "complete",
            "ttlMs": 60000,
            "cacheScope": "private",
            "_meta": {"io.modelcontextprotocol/serverInfo": info},
        },
    )
    called = shaped("tools/call", ok(6, {"content": []}), cache_ttl_ms=60000, server_info=None)
    assert called == ok(6, {"content": [], "resultType": "complete"})


def test_discover_and_input_required() -> None:
    init = {"capabilities": {"tools": {}, "tasks": {"x": {}}}, "instructions": "hi"}
    result = discover_result(init, tasks_enabled=True, cache_ttl_ms=10)
    assert result["capabilities"] == {"tools": {}, "extensions": {TASKS_EXTENSION: {}}}
    assert result["instructions"] == "hi" and result["resultType"] == "complete"
    assert "_meta" not in result
    call = attached(capabilities=ASKS)
    ask(call, "s1")
    assert input_required_result(call, "STATE") == {
        "resultType": "input_required",
        "inputRequests": {
            "elicitation-1": {"method": "elicitation/create", "params": {"message": "?"}}
        },
        "requestState": "STATE",
    }


def test_needs_tasks_only_for_required_tools_without_the_extension() -> None:
    from proxy.core.follow import needs_tasks

    assert needs_tasks("required", tasks_enabled=True, client_tasks=False)
    assert needs_tasks("required", tasks_enabled=False, client_tasks=True)
    assert not needs_tasks("required", tasks_enabled=True, client_tasks=True)
    assert not needs_tasks("optional", tasks_enabled=False, client_tasks=False)


def test_routes_by_method() -> None:
    from proxy.core.modern_routes import Route, route

    assert route("server/discover", {}, tasks_enabled=True) is Route.DISCOVER
    assert route("tasks/get", {}, tasks_enabled=True) is Route.TASK
    assert route("tasks/get", {}, tasks_enabled=False) is Route.NOT_FOUND
    assert route("subscriptions/listen", {}, tasks_enabled=True) is Route.LISTEN
    assert route("tools/call", {}, tasks_enabled=True) is Route.START
    assert route("prompts/get", {"requestState": "s"}, tasks_enabled=True) is Route.RETRY
    assert route("tools/list", {"requestState": "s"}, tasks_enabled=True) is Route.START
    assert route("initialize", {}, tasks_enabled=True) is Route.NOT_FOUND
