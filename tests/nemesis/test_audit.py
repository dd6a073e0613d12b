"""The nemesis's after-run checks can fail: a Redis key without a TTL is found (one with
a TTL is not), and a process left running under this one is listed until it ends."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import redis.asyncio as aioredis

from tests.nemesis.audit import keys_without_ttl, leftover_processes
from tests.redis_server import RedisServer


async def test_a_key_without_a_ttl_is_found(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis") as server:
        client = aioredis.from_url(server.url)
        try:
            await client.set("mrp:{n}:kept", "1", ex=60)
            assert await keys_without_ttl(server.url) == []
            await client.set("mrp:{n}:forever", "1")
            assert await keys_without_ttl(server.url) == ["mrp:{n}:forever"]
        finally:
            await client.aclose()


async def test_a_process_left_running_is_listed() -> None:
    before = set(leftover_processes(set()))
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import time; time.sleep(60)"
    )
    try:
        left = [p for p in leftover_processes(set()) if p not in before]
        assert any(p.startswith(f"{child.pid} ") for p in left), left
        assert set(leftover_processes({child.pid})) == before
    finally:
        child.kill()
        await child.wait()
    assert not any(p.startswith(f"{child.pid} ") for p in leftover_processes(set()))
