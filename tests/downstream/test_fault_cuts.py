"""Cut the client's connection at many seeded random byte offsets of a long burst.

Each cut lands anywhere, also in the middle of an SSE event; the client keeps only the
events it received whole and resumes with the id of the last of them (GET +
Last-Event-ID), as the WHATWG event-stream rules and the MCP transports ask. The sequence
it ends up with must equal what the server sent: no gap, no duplicate.

Replay a failure with the seed it printed (the ``seed`` fixture of tests/conftest.py):
``pytest --seed <seed> tests/downstream/test_fault_cuts.py``.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from proxy.core.sse import SSEDecoder
from tests.downstream.sse_client import proxy_session
from tests.support import FIXTURE

N = 2000
CUTS = 220
PRIMED = 100


async def _cut_and_resume(
    tmp_path: Path, seed: int, tool: str, tool_args: dict[str, Any], n: int, text: str
) -> None:
    rng = random.Random(seed)
    async with proxy_session(tmp_path, command=FIXTURE) as (proxy, http, s):
        approx_total = n * 300
        # The first cut falls after the priming event (~45 bytes): a client cut before any
        # event id has nothing to resume from, and re-sending the call would be another call.
        cuts = sorted(rng.randrange(PRIMED, approx_total) for _ in range(CUTS))
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": tool, "arguments": tool_args, "_meta": {"progressToken": "b"}},
        }
        received: list[dict[str, Any]] = []
        last_id: str | None = None
        offset = 0  # bytes read over all connections
        connections = 0
        done = False
        while not done:
            connections += 1
            if connections == 1:
                resp = await http.post(proxy.url, json=body, headers=s.headers())
            else:
                resp = await http.get(proxy.url, headers=s.headers(**{"Last-Event-ID": last_id}))
            assert resp.status == 200, (resp.status, await resp.text(), last_id)
            assert connections == 1 or last_id is not None, "cut before the first event id"
            dec = SSEDecoder()
            try:
                async for chunk in resp.content.iter_any():
                    cut = cuts[0] if cuts else None
                    if cut is not None and offset + len(chunk) >= cut:
                        chunk = chunk[: cut - offset]
                        cuts.pop(0)
                    offset += len(chunk)
                    for event in dec.feed(chunk):
                        if event.id is not None:
                            last_id = event.id
                        if event.data:
                            received.append(json.loads(event.data))
                    if cut is not None and offset >= cut:
                        break  # hang up here, maybe mid-event
                else:
                    done = True  # the proxy ended the stream: the response was sent
            finally:
                resp.close()
        progress = [m["params"]["progress"] for m in received if m.get("method")]
        results = [m for m in received if "result" in m or "error" in m]
        first_bad = next((i for i, p in enumerate(progress) if p != i + 1), min(len(progress), n))
        assert progress == list(range(1, n + 1)), (
            f"seed {seed}: gap or duplicate at index {first_bad}: "
            f"{progress[max(0, first_bad - 3) : first_bad + 3]}"
        )
        assert len(results) == 1 and results[0]["id"] == 1, results
        assert results[0]["result"]["content"][0]["text"] == text
        assert received[-1] is results[0], "the response comes last"
        assert connections > CUTS // 4, f"only {connections} connections: cuts did not land"


async def test_burst_survives_many_random_cuts(tmp_path: Path, seed: int) -> None:
    await _cut_and_resume(tmp_path, seed, "burst", {"n": N, "size": 200}, N, f"burst {N}")


async def test_paced_stream_survives_cuts_at_the_replay_to_live_seam(
    tmp_path: Path, seed: int
) -> None:
    """Events keep arriving while each replay runs: the hand-over must not lose any."""
    n = 600
    await _cut_and_resume(tmp_path, seed, "slow", {"steps": n, "delay": 0.003}, n, f"done {n}")
