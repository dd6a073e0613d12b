"""MRTR through the proxy: a legacy server's question to its client becomes an
``input_required`` result, and the client's retry continues the same upstream call."""

from __future__ import annotations

import json
from pathlib import Path

from tests.modern.support import modern_proxy, received
from tests.support import eventually


async def test_mrtr_elicitation_continues_the_same_upstream_call(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path) as (_, client, server_log):
        first = await client.call("ask_twice")
        assert first.result["resultType"] == "input_required"
        (key,) = first.result["inputRequests"]
        assert first.result["inputRequests"][key]["method"] == "elicitation/create"
        assert first.result["inputRequests"][key]["params"]["message"] == "one"
        state = first.result["requestState"]
        # A retry without the answer gets the same question again (spec: ask anew).
        again = await client.send(
            "tools/call",
            {"name": "ask_twice", "arguments": {}, "requestState": state, "inputResponses": {}},
        )
        assert again.result["resultType"] == "input_required"
        assert list(again.result["inputRequests"]) == [key]
        second = await client.send(
            "tools/call",
            {
                "name": "ask_twice",
                "arguments": {},
                "requestState": again.result["requestState"],
                "inputResponses": {key: {"action": "accept", "content": {"answer": "A"}}},
            },
        )
        assert second.result["resultType"] == "input_required"
        (key2,) = second.result["inputRequests"]
        assert key2 != key  # keys are unique over the call's life
        done = await client.send(
            "tools/call",
            {
                "name": "ask_twice",
                "arguments": {},
                "requestState": second.result["requestState"],
                "inputResponses": {key2: {"action": "accept", "content": {"answer": "B"}}},
            },
        )
        answers = json.loads(done.result["content"][0]["text"])
        assert [a["content"]["answer"] for a in answers] == ["A", "B"]
    calls = [m for m in received(server_log) if m.get("method") == "tools/call"]
    assert len(calls) == 1  # one upstream call served all four client requests


async def test_sampling_and_roots_through_mrtr(tmp_path: Path) -> None:
    async with modern_proxy(tmp_path) as (_, client, _log):
        for tool, method, reply in [
            (
                "sample",
                "sampling/createMessage",
                {"role": "assistant", "content": {"type": "text", "text": "hello"}, "model": "m"},
            ),
            ("roots", "roots/list", {"roots": [{"uri": "file:///w"}]}),
        ]:
            first = await client.call(tool)
            ((key, request),) = first.result["inputRequests"].items()
            assert request["method"] == method
            done = await client.send(
                "tools/call",
                {
                    "name": tool,
                    "arguments": {},
                    "requestState": first.result["requestState"],
                    "inputResponses": {key: reply},
                },
            )
            assert json.loads(done.result["content"][0]["text"]) == reply


async def test_tampered_foreign_or_stale_request_state_never_gets_another_calls_answer(
    tmp_path: Path,
) -> None:
    async with modern_proxy(tmp_path, modern={"input_ttl_seconds": 1.0}) as (
        _,
        client,
        server_log,
    ):
        first = await client.call("ask", {"question": "q"})
        state = first.result["requestState"]
        (key,) = first.result["inputRequests"]
        answer = {key: {"action": "accept", "content": {"answer": "x"}}}
        payload, sig = state.split(".")
        tampered = payload[:-2] + ("AA" if payload[-2:] != "AA" else "BB") + "." + sig
        for bad, tool in [(tampered, "ask"), ("garbage", "ask"), (state, "ask_twice")]:
            refused = await client.send(
                "tools/call",
                {"name": tool, "arguments": {}, "requestState": bad, "inputResponses": answer},
            )
            assert refused.error["code"] == -32602, refused.body
        # The genuine state still works once, then it is spent.
        ok = await client.send(
            "tools/call",
            {"name": "ask", "arguments": {}, "requestState": state, "inputResponses": answer},
        )
        assert ok.result["resultType"] == "complete"
        spent = await client.send(
            "tools/call",
            {"name": "ask", "arguments": {}, "requestState": state, "inputResponses": answer},
        )
        assert spent.error["code"] == -32602
        # Stale: nobody answered within modern.input_ttl_seconds; the call was cancelled.
        late = await client.call("ask", {"question": "late"})

        def late_call_cancelled() -> bool:
            seen = received(server_log)
            ids = [
                m["id"]
                for m in seen
                if m.get("method") == "tools/call"
                and m["params"].get("arguments") == {"question": "late"}
            ]
            return any(
                m.get("method") == "notifications/cancelled" and m["params"].get("requestId") in ids
                for m in seen
            )

        # The parked call is cancelled upstream when its state goes stale (one step).
        await eventually(late_call_cancelled, what="the unanswered call cancelled upstream")
        stale = await client.send(
            "tools/call",
            {
                "name": "ask",
                "arguments": {},
                "requestState": late.result["requestState"],
                "inputResponses": answer,
            },
        )
        assert stale.error["code"] == -32602


async def test_input_the_client_did_not_declare_is_refused_upstream_and_may_be_32021(
    tmp_path: Path,
) -> None:
    async with modern_proxy(tmp_path) as (_, client, _log):
        # The server hears the refusal a legacy client would give, and carries on ...
        carried_on = await client.call("ask", {"question": "q"}, caps={})
        # ... or fails: then the client learns what it lacked.
        failed = await client.call("need_sample", caps={"elicitation": {}})
    refusal = json.loads(carried_on.result["content"][0]["text"])
    assert refusal["code"] == -32601
    assert failed.status == 400
    assert failed.error["code"] == -32021
    assert failed.error["data"]["requiredCapabilities"] == {"sampling": {}}
