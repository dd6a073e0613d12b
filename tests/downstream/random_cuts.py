"""Cut a client's SSE response at many seeded random byte offsets and resume each time.

:func:`cut_and_resume` posts a long call (:func:`burst`, or :func:`paced` so that events
keep arriving while each replay runs), cuts the response anywhere (also mid-event), keeps
only the events received whole, resumes with GET + Last-Event-ID from the last of them (the
WHATWG event-stream rules, 2025-11-25 transports §Resumability), and checks that what it
ends up with is exactly what the server sent. tests/downstream/test_fault_cuts.py runs it
on one proxy, tests/test_store_chaos.py across two replicas.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from proxy.core.sse import SSEDecoder
from tests.downstream.sse_client import RawSession

N = 2000
CUTS = 220
PRIMED = 100


@dataclass
class Call:
    """A ``tools/call`` of the fixture server and what its stream must carry: ``n``
    progress notifications 1..n, then the result ``text``."""

    tool: str
    arguments: dict[str, Any]
    n: int
    text: str


def burst(n: int = N) -> Call:
    return Call("burst", {"n": n, "size": 200}, n, f"burst {n}")


def paced(n: int = 600, delay: float = 0.003) -> Call:
    """Events still arrive while each replay runs: the replay-to-live hand-over is hit."""
    return Call("slow", {"steps": n, "delay": delay}, n, f"done {n}")


async def cut_and_resume(
    http: aiohttp.ClientSession,
    session: RawSession,
    seed: int,
    label: str,
    call: Call,
    post_url: str,
    resume_urls: Sequence[str],
    cuts_count: int = CUTS,
) -> None:
    """POST ``call`` to ``post_url``, cut the response at ``cuts_count`` random byte offsets
    drawn from ``seed``, and resume each time with GET + Last-Event-ID, the i-th resume on
    ``resume_urls[(i - 1) % len(resume_urls)]``; then check that what was received is
    exactly what the server sent. ``label`` names the setup in failure messages."""
    rng = random.Random(seed)
    approx_total = call.n * 300
    # The first cut falls after the priming event (~45 bytes): a client cut before any
    # event id has nothing to resume from, and re-sending the call would be another call.
    cuts = sorted(rng.randrange(PRIMED, approx_total) for _ in range(cuts_count))
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": call.tool,
            "arguments": call.arguments,
            "_meta": {"progressToken": "b"},
        },
    }
    received: list[dict[str, Any]] = []
    # For failure messages: each connection's URL, the id it resumed after, and the index
    # in ``received`` of its first message.
    trail: list[tuple[str, str | None, int]] = []
    last_id: str | None = None
    offset = 0  # bytes read over all connections
    connections = 0
    done = False
    while not done:
        connections += 1
        if connections == 1:
            url = post_url
            resp = await http.post(url, json=body, headers=session.headers())
        else:
            url = resume_urls[(connections - 2) % len(resume_urls)]
            resp = await http.get(url, headers=session.headers(**{"Last-Event-ID": last_id}))
        trail.append((url, last_id if connections > 1 else None, len(received)))
        if resp.status == 410 and any("id" in m for m in received):
            # The cut fell right after the response, before the end of the stream: the
            # client has it all, and resuming says so explicitly.
            error = (await resp.json())["error"]
            resp.close()
            assert error["data"] == {"reason": "stream_completed"}, f"seed {seed} [{label}]"
            break
        assert resp.status == 200, (
            f"seed {seed} [{label}]: connection {connections} to {url} after {last_id}: "
            f"{resp.status} {await resp.text()}"
        )
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
    n = call.n
    first_bad = next((i for i, p in enumerate(progress) if p != i + 1), min(len(progress), n))
    context = ""
    if progress != list(range(1, n + 1)):
        # Name the connection that delivered the first wrong notification (or the last).
        positions = [i for i, m in enumerate(received) if m.get("method")]
        where = positions[first_bad] if first_bad < len(positions) else len(received)
        conn = max(i for i, t in enumerate(trail) if t[2] <= where)
        url, after, _ = trail[conn]
        context = f"connection {conn + 1} of {connections} ({url}, after id {after})"
    assert progress == list(range(1, n + 1)), (
        f"seed {seed} [{label}]: gap or duplicate at index {first_bad}: "
        f"{progress[max(0, first_bad - 3) : first_bad + 3]}; {context}"
    )
    assert len(results) == 1 and results[0]["id"] == 1, f"seed {seed} [{label}]: {results}"
    assert results[0]["result"]["content"][0]["text"] == call.text
    assert received[-1] is results[0], f"seed {seed} [{label}]: the response comes last"
    assert connections > cuts_count // 4, (
        f"seed {seed} [{label}]: only {connections} connections: cuts did not land"
    )
