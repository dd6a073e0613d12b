"""Cut the client's connection at many seeded random byte offsets of a long burst.

Each cut lands anywhere, also in the middle of an SSE event; the client keeps only the
events it received whole and resumes with the id of the last of them (GET +
Last-Event-ID), as the WHATWG event-stream rules and the MCP transports ask. The sequence
it ends up with must equal what the server sent: no gap, no duplicate.

Each test runs on every store (``[memory]``, ``[sqlite]``, ``[redis]``, docs/stores.md):
on the persistent ones an event reaches the wire only once it is in the store, so the
seams between replay and live tail differ. :func:`cut_and_resume`
(tests/downstream/random_cuts.py) is also what tests/test_store_chaos.py runs across two
replicas.

Replay a failure with the seed it printed (the ``seed`` fixture of tests/conftest.py):
``pytest --seed <seed> tests/downstream/test_fault_cuts.py``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.downstream.random_cuts import Call, burst, cut_and_resume, paced
from tests.downstream.sse_client import proxy_session
from tests.support import FIXTURE

SECRET = "a-test-secret-of-some-length"  # sqlite and redis refuse to start without one

_namespaces = itertools.count()


@dataclass(frozen=True)
class StoreSetup:
    """The config sections that put the proxy on one store."""

    kind: str
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)


@pytest.fixture(params=["memory", "sqlite", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreSetup:
    """The proxy's store: memory (the default), a SQLite file in ``tmp_path``, or the
    session's real Redis (``redis_url``, started only when a redis test runs) under a
    namespace of this test's own."""
    kind: str = request.param
    if kind == "memory":
        return StoreSetup(kind)
    if kind == "sqlite":
        config = {"kind": "sqlite", "path": str(tmp_path / "store.db")}
    else:
        url = request.getfixturevalue("redis_url")
        config = {"kind": "redis", "url": url, "namespace": f"fault-cuts{next(_namespaces)}"}
    return StoreSetup(kind, {"store": config, "streams": {"token_secret": SECRET}})


async def _on_one_proxy(tmp_path: Path, seed: int, store: StoreSetup, call: Call) -> None:
    async with proxy_session(tmp_path, command=FIXTURE, **store.sections) as (proxy, http, s):
        await cut_and_resume(http, s, seed, store.kind, call, proxy.url, [proxy.url])


async def test_burst_survives_many_random_cuts(
    tmp_path: Path, seed: int, store: StoreSetup
) -> None:
    await _on_one_proxy(tmp_path, seed, store, burst())


async def test_paced_stream_survives_cuts_at_the_replay_to_live_seam(
    tmp_path: Path, seed: int, store: StoreSetup
) -> None:
    """Events keep arriving while each replay runs: the hand-over must not lose any."""
    await _on_one_proxy(tmp_path, seed, store, paced())
