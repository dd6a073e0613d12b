"""Cut-and-resume chaos across two replicas on one real Redis (docs/stores.md, Replicas).

The call is POSTed to replica A, which holds the session and runs the server. Its
response is cut at many seeded random byte offsets, also mid-event; every resume (GET +
Last-Event-ID, A's session id) alternates between B and A, the first on B. B serves the
stream from the shared log (replay, then its live tail), A from its session. Whatever the
seams, the client must end up with exactly what the server sent: every progress
notification once and in order, then the result, once and last.

Replay a failure with the seed it printed: ``pytest --seed N tests/test_store_chaos.py``.
"""

from __future__ import annotations

from pathlib import Path

from tests.downstream.random_cuts import Call, burst, cut_and_resume, paced
from tests.downstream.sse_client import RawSession
from tests.proxy_lives import lives, shared


async def _across_replicas(tmp_path: Path, redis_url: str, seed: int, call: Call) -> None:
    async with lives(tmp_path, shared(redis_url)) as (proxies, http):
        a, b = await proxies.start(), await proxies.start()
        client = RawSession(http, a.url)
        await client.initialize()
        await cut_and_resume(http, client, seed, "replicas A/B", call, a.url, [b.url, a.url])


async def test_burst_cut_at_random_resumes_alternately_on_both_replicas(
    tmp_path: Path, redis_url: str, seed: int
) -> None:
    await _across_replicas(tmp_path, redis_url, seed, burst())


async def test_paced_stream_cut_at_random_resumes_alternately_on_both_replicas(
    tmp_path: Path, redis_url: str, seed: int
) -> None:
    """Events keep arriving while each replay runs, on A and on B's live tail of the log."""
    await _across_replicas(tmp_path, redis_url, seed, paced())
