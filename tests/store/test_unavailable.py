"""A request's store call waits a bounded time, then is refused (proxy/store/unavailable.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from proxy.core.errors import ResumeError, StoreUnavailable
from proxy.downstream.wire import error_response
from proxy.store.base import StoreError
from proxy.store.memory import MemoryStore
from proxy.store.unavailable import patiently


def flaky(failures: int) -> tuple[list[int], Callable[[], Awaitable[str]]]:
    calls: list[int] = []

    async def call() -> str:
        calls.append(1)
        if len(calls) <= failures:
            raise StoreError("redis at 127.0.0.1:1: read failed: connection refused")
        return "read"

    return calls, call


async def test_a_store_that_comes_back_within_the_wait_answers_the_request() -> None:
    store = MemoryStore()
    store.unavailable_wait = 5.0
    calls, call = flaky(2)
    assert await patiently(store, "read a stream", call) == "read"
    assert len(calls) == 3


async def test_a_store_that_stays_away_is_refused_after_the_wait() -> None:
    store = MemoryStore()
    store.unavailable_wait = 0.3
    calls, call = flaky(10**6)
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(StoreUnavailable) as caught:
        await patiently(store, "read a stream", call)
    assert 0.3 <= loop.time() - began < 2.0 and len(calls) > 1
    response = error_response(caught.value)
    assert response.status == 503 and response.headers["Retry-After"] == "1"
    assert caught.value.to_jsonrpc(4)["error"] == {
        "code": -32000,
        "message": "the proxy's store is unavailable (read a stream); try again",
        "data": {"reason": "store_unavailable"},
    }


async def test_only_store_errors_are_waited_for() -> None:
    store = MemoryStore()

    async def gone() -> None:
        raise ResumeError("the stream has expired or never existed", reason="unknown_stream")

    with pytest.raises(ResumeError):
        await patiently(store, "read a stream", gone)
