"""No secret in the logs: a scenario through the proxy at ``log.level: debug`` with
``--log-format json`` (the config's ``log.format: json``), then every line is searched for
every secret the scenario handled: the upstream's ``Authorization`` header value, the
token secret, a full session id, a resume token, an MRTR ``requestState``, a task id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp

from tests.downstream.sse_client import RawSession, messages
from tests.e2e.node_tools import run_server_everything
from tests.modern.client import TASKS, Modern
from tests.support import run_proxy_on, tool_call

HEADER_SECRET = "hdr-secret-4d1c8e0b9a7f"
TOKEN_SECRET = "token-secret-with-some-length-7e2"


async def test_no_secret_reaches_the_logs(tmp_path: Path) -> None:
    seen: dict[str, str] = {}
    async with run_server_everything("streamableHttp", tmp_path) as everything:
        config: dict[str, Any] = {
            "listen": {"host": "127.0.0.1", "port": 0},
            "upstream": {
                "url": f"{everything.base}/mcp",
                "headers": {"Authorization": "Bearer ${UPSTREAM_TOKEN}"},
            },
            "streams": {"token_secret": TOKEN_SECRET},
            "tasks": {"mode": "always"},
            "log": {"format": "json", "level": "debug"},
        }
        env = {"UPSTREAM_TOKEN": HEADER_SECRET}
        async with run_proxy_on(tmp_path, config, env) as proxy, aiohttp.ClientSession() as http:
            # Legacy, with the seed's streams: a resume token, then a resume with it.
            legacy = RawSession(http, proxy.url)
            await legacy.initialize_with({"streams": {}})
            seen["session id"] = legacy.session_id
            call = tool_call(2, "trigger-long-running-operation", {"duration": 0.2, "steps": 2})
            events = await legacy.request(2, "tools/call", call["params"])
            created = [m for m in messages(events) if m.get("method") == "notifications/stream"]
            stream = created[0]["params"]["stream"] if created else None
            if stream is not None:
                seen["resume token"] = stream["resumeToken"]
                await legacy.request(
                    3,
                    "stream/poll",
                    {"streamId": stream["streamId"], "resumeToken": stream["resumeToken"]},
                )
            # Modern: an MRTR requestState and a task id.
            modern = Modern(http, proxy.url, caps={"sampling": {}})
            first = await modern.call("trigger-sampling-request", {"prompt": "p", "maxTokens": 5})
            seen["requestState"] = first.result["requestState"]
            # (The TypeScript SDK lists its tools taskSupport "forbidden" unless they were
            # registered as task tools: this one is "required".)
            task = await modern.call("simulate-research-query", {"topic": "t"}, caps=TASKS)
            seen["task id"] = task.result["taskId"]
            await Modern(http, proxy.url, caps=TASKS).task("tasks/get", task.result["taskId"])
            log_text = proxy.log_text()
    secrets = {"header": HEADER_SECRET, "token secret": TOKEN_SECRET, **seen}
    lines = log_text.splitlines()
    assert lines and all(json.loads(line) for line in lines if line.startswith("{"))
    leaks = {what: value for what, value in secrets.items() if value in log_text}
    assert not leaks, f"secrets in the log: {sorted(leaks)}"
    assert len(seen) >= 3, seen  # the scenario did handle them
