"""A legacy server's -32042 "URL elicitation required" through the proxy: a modern client
that declared URL elicitation gets ``input_required`` with URL-mode ``elicitation/create``
input requests, and its accepting retry sends the original request to the server again
(the 2025-11-25 URL flow: the client retries after the out-of-band step)."""

from __future__ import annotations

from pathlib import Path

from tests.modern.support import modern_proxy, received

URL_MODE = {"elicitation": {"form": {}, "url": {}}}


def connects(server_log: Path) -> list[dict[str, object]]:
    return [
        m["params"]["arguments"]
        for m in received(server_log)
        if m.get("method") == "tools/call" and m["params"]["name"] == "connect"
    ]


async def test_an_accepted_url_elicitation_sends_the_request_again(tmp_path: Path) -> None:
    marker = str(tmp_path / "connected")
    async with modern_proxy(tmp_path) as (_, client, server_log):
        first = await client.call("connect", {"marker": marker}, caps=URL_MODE)
        assert first.status == 200
        assert first.result["resultType"] == "input_required"
        assert first.result["inputRequests"] == {
            "connect-1": {
                "method": "elicitation/create",
                "params": {
                    "mode": "url",
                    "message": "Connect your account first.",
                    "url": "https://example.com/connect?session=1",
                },
            }
        }
        assert connects(server_log) == [{"marker": marker}]
        # A retry without the answer gets the same question again; nothing goes upstream.
        again = await client.send(
            "tools/call",
            {
                "name": "connect",
                "arguments": {"marker": marker},
                "requestState": first.result["requestState"],
                "inputResponses": {},
            },
            caps=URL_MODE,
        )
        assert list(again.result["inputRequests"]) == ["connect-1"]
        done = await client.send(
            "tools/call",
            {
                "name": "connect",
                "arguments": {"marker": marker},
                "requestState": again.result["requestState"],
                "inputResponses": {"connect-1": {"action": "accept"}},
            },
            caps=URL_MODE,
        )
        assert done.result["resultType"] == "complete"
        assert done.result["content"][0]["text"] == "connected"
        assert connects(server_log) == [{"marker": marker}, {"marker": marker}]


async def test_a_declined_url_elicitation_is_an_error_and_the_server_is_not_asked_again(
    tmp_path: Path,
) -> None:
    marker = str(tmp_path / "connected")
    async with modern_proxy(tmp_path) as (_, client, server_log):
        first = await client.call("connect", {"marker": marker}, caps=URL_MODE)
        declined = await client.send(
            "tools/call",
            {
                "name": "connect",
                "arguments": {"marker": marker},
                "requestState": first.result["requestState"],
                "inputResponses": {"connect-1": {"action": "decline"}},
            },
            caps=URL_MODE,
        )
        assert declined.status == 200
        assert declined.error["code"] == -32000
        assert declined.error["data"] == {
            "reason": "url_elicitation_declined",
            "upstreamCode": -32042,
            "url": "https://example.com/connect?session=1",
        }
        assert len(connects(server_log)) == 1


async def test_a_client_without_url_elicitation_gets_the_servers_error(tmp_path: Path) -> None:
    # client/elicitation.mdx §Capabilities: {"elicitation": {}} is form mode only.
    marker = str(tmp_path / "connected")
    async with modern_proxy(tmp_path) as (_, client, _log):
        answer = await client.call("connect", {"marker": marker}, caps={"elicitation": {}})
        assert answer.error["code"] == -32042
        assert answer.error["data"]["elicitations"][0]["elicitationId"] == "connect-1"
