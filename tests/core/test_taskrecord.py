"""Task records kept up to date with their call, and orphaned (proxy/core/taskrecord.py)."""

from __future__ import annotations

from proxy.core import jsonrpc
from proxy.core.call import Call
from proxy.core.era import ModernRequest
from proxy.core.taskrecord import detailed, may_be_orphaned, new_record, orphaned_by, refresh
from tests.core.playbook import ok, req

NOW = 1_700_000_000.0


def call_and_record(era: str = "modern") -> tuple[Call, dict[str, object]]:
    client = ModernRequest("2026-07-28", {"elicitation": {}}, None, None, None)
    call = Call("tools/call", {"name": "slow"}, client, "alice")
    call.upstream_id = 1
    record = new_record("t1", NOW, 60_000, 500, owner="r1", principal="alice", era=era)
    return call, record


def test_progress_alone_is_no_change_a_task_client_sees() -> None:
    call, record = call_and_record()
    assert not refresh(record, call, NOW + 1)
    assert record["status"] == "working" and record["lastUpdatedAt"] == "2023-11-14T22:13:21.000Z"


def test_questions_and_the_result_are_written() -> None:
    call, record = call_and_record()
    call.ask(jsonrpc.classify(req("s1", "elicitation/create", {"message": "?"})))
    assert refresh(record, call, NOW)
    assert detailed(record)["inputRequests"] == {
        "elicitation-1": {"method": "elicitation/create", "params": {"message": "?"}}
    }
    call.answer({"elicitation-1": {"action": "accept"}})
    assert refresh(record, call, NOW)
    related = {"io.modelcontextprotocol/related-task": {"taskId": "legacy"}}
    call.respond(jsonrpc.classify(ok(1, {"content": [], "_meta": related})))
    assert refresh(record, call, NOW)
    assert record["status"] == "completed"
    assert record["result"] == {"content": [], "resultType": "complete"}  # legacy _meta gone


def test_a_failed_call_keeps_its_error() -> None:
    call, record = call_and_record("legacy")
    call.fail({"code": -32000, "message": "down"})
    assert refresh(record, call, NOW)
    assert record["error"] == {"code": -32000, "message": "down"}


def test_a_running_task_of_a_dead_owner_is_failed_with_the_reason() -> None:
    _, record = call_and_record()
    assert may_be_orphaned(record, "r2") and not may_be_orphaned(record, "r1")
    lost = orphaned_by(record, shared=True, now=NOW)
    assert lost["status"] == "failed" and lost["error"]["data"] == {"reason": "owner_lost"}
    restarted = orphaned_by(record, shared=False, now=NOW)
    assert restarted["error"]["data"] == {"reason": "proxy_restarted"}
    assert not may_be_orphaned(lost, "r2")
