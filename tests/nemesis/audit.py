"""After a nemesis run: what the store holds of each call, and what is left behind.

- :func:`audit_legacy`: a legacy call's stream replayed from its first event id (``GET`` +
  ``Last-Event-ID`` through the balancer, so any replica serves it from the store): its
  progress and every answer to the call's request, to hold against what the client was
  told (tests/nemesis/checker.py ``check_audit``).
- :func:`audit_task`: a modern task's record (``tasks/get``): its end, if it ended.
- :func:`keys_without_ttl`: every Redis key that would never expire (SCAN + TTL).
- :func:`leftover_processes`: live descendants of this process other than those allowed.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import aiohttp
import redis.asyncio as aioredis

from proxy.core.sse import SSEDecoder
from tests.modern.client import Modern
from tests.nemesis.history import Audit, Call
from tests.nemesis.http_clients import reason_of, task_ended
from tests.support import MCP_HEADERS, descendants

AUDIT_S = 10.0  # the whole read of one stream: a complete stream replays at once


async def audit_legacy(http: aiohttp.ClientSession, url: str, call: Call) -> Audit:
    assert call.stream is not None
    rid = int(call.label.rsplit("#", 1)[1])
    headers = {
        **MCP_HEADERS,
        "Mcp-Session-Id": call.stream["session"],
        "MCP-Protocol-Version": "2025-11-25",
        "Last-Event-ID": call.stream["event"],
    }
    audit = Audit()
    try:
        async with asyncio.timeout(AUDIT_S), http.get(url, headers=headers) as resp:
            if resp.status != 200:
                text = await resp.text()
                try:
                    body = json.loads(text)
                except ValueError:
                    body = None
                return Audit(gone=f"{resp.status} {reason_of(body, resp.status)}")
            decoder = SSEDecoder()
            while True:
                chunk = await resp.content.readany()
                if not chunk:
                    break
                for event in decoder.feed(chunk):
                    if not event.data:
                        continue
                    msg = json.loads(event.data)
                    if msg.get("method") == "notifications/progress":
                        audit.progress.append(int(msg["params"]["progress"]))
                    elif msg.get("id") == rid and "method" not in msg:
                        if "result" in msg:
                            content = msg["result"].get("content") or [{}]
                            audit.answers.append(("result", str(content[0].get("text"))))
                        else:
                            audit.answers.append(("error", reason_of(msg)))
    except TimeoutError:
        audit.answers.append(("error", "audit: the stream is still open"))
    except aiohttp.ClientError as exc:
        return Audit(gone=f"unreadable: {exc!r}")
    return audit


async def audit_task(client: Modern, call: Call) -> Audit:
    assert call.stream is not None
    try:
        async with asyncio.timeout(AUDIT_S):
            got = await client.task("tasks/get", call.stream["task"])
    except (aiohttp.ClientError, ValueError, TimeoutError) as exc:
        return Audit(gone=f"unreadable: {exc!r}")
    if "error" in got.body:
        return Audit(gone=f"{got.status} {reason_of(got.body, got.status)}")
    probe = Call(call.client, call.kind, call.label, call.tool, call.expect, 0.0)
    task_ended(got.body.get("result", {}), probe, 0.0)
    return Audit(progress=list(call.progress), answers=probe.answers)


async def keys_without_ttl(url: str) -> list[str]:
    client = aioredis.from_url(url)
    try:
        found = []
        async for key in client.scan_iter(count=1000):
            if await client.ttl(key) == -1:
                found.append(key.decode(errors="replace"))
        return sorted(found)
    finally:
        await client.aclose()


def command_line(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def leftover_processes(allowed: set[int]) -> list[str]:
    """Live descendants of this process, but ``allowed`` (Redis, still needed), as
    ``pid command``; xdist's own machinery starts none under a worker."""
    return [
        f"{pid} {command_line(pid)[:120]}" for pid in sorted(descendants(os.getpid()) - allowed)
    ]
