"""A task whose owner is gone, asked about on another replica (proxy/modern/tasks.py,
TaskKeeper.record), in-process on the memory store: the client is told ``owner_lost``
only once the store holds that end.

- The store takes the ended record: the client gets it.
- The owner's final record landed first (the store refuses to end an ended task): the
  client gets that one, the store's.
- The store fails: the client waits for it (bounded), then gets 503 store_unavailable.
  Was: told ``owner_lost`` although the write had failed, and the owner's result landed
  later (nemesis: a modern task told ``owner_lost`` whose stored answer was its result).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from proxy.config_sections import TasksConfig
from proxy.core.errors import StoreUnavailable
from proxy.core.taskrecord import TERMINAL, new_record
from proxy.modern.tasks import TaskKeeper
from proxy.store.base import StoreError
from proxy.store.memory import MemoryStore


async def gone(owner: str) -> bool:
    return False


def keeper(store: MemoryStore) -> TaskKeeper:
    return TaskKeeper(
        TasksConfig(), store, "here", shared=True, alive=gone, forward=None, publish=lambda _: None
    )


async def stored_task(store: MemoryStore, status: str = "working") -> str:
    now = time.time()
    record = new_record("t-1", now, 60_000, 1000, owner="gone", principal=None, era="modern")
    record["status"] = status
    if status == "completed":
        record["result"] = {"content": [{"type": "text", "text": "done"}]}
    assert await store.put_task("t-1", record, record["expiresAt"])
    return "t-1"


async def test_the_store_takes_the_end_and_the_client_gets_it(memory_store: MemoryStore) -> None:
    task = await stored_task(memory_store)
    got = await keeper(memory_store).record(task, None)
    assert got["status"] == "failed"
    stored = await memory_store.get_task(task, time.time())
    assert stored is not None and stored["status"] == "failed"


async def test_an_end_that_landed_first_stands(memory_store: MemoryStore) -> None:
    task = await stored_task(memory_store)
    get = memory_store.get_task
    calls = 0

    async def the_owner_ends_it_meanwhile(task_id: str, now: float) -> dict[str, Any] | None:
        nonlocal calls
        calls += 1
        record = await get(task_id, now)
        if calls == 1 and record is not None:  # the owner's result lands after this read
            done = {**record, "status": "completed", "result": {"content": []}}
            assert await memory_store.put_task(task_id, done, record["expiresAt"])
        return record

    memory_store.get_task = the_owner_ends_it_meanwhile  # type: ignore[method-assign]
    got = await keeper(memory_store).record(task, None)
    assert got["status"] == "completed"
    assert got["status"] in TERMINAL


async def test_a_store_that_fails_the_end_is_waited_for_then_503(
    memory_store: MemoryStore,
) -> None:
    task = await stored_task(memory_store)
    memory_store.unavailable_wait = 0.2

    async def failing(task_id: str, record: dict[str, Any], expires_at: float) -> bool:
        raise StoreError("redis restarting")

    memory_store.put_task = failing  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailable):
        await keeper(memory_store).record(task, None)
