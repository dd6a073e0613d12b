"""The large-result column of the client matrix: fastmcp 4.2 and the MCP Inspector 2.12 CLI,
with their default settings, get a 5 MB and a 20 MB tool result in each era they speak
(tests/clients/expected.py ``LARGE``, shown in docs/clients.md).

The proxy runs with its defaults too (``upstream.max_line_bytes`` is 64 MiB). fastmcp at
2025-11-25 reads SSE through the Python SDK, whose events are capped at 1 MiB: it gets
these results because a large answer that comes at once is sent as JSON
(``sse.json_answer_window_ms``).
"""

from __future__ import annotations

from pathlib import Path

from tests.clients.expected import LARGE, LARGE_SIZES
from tests.clients.matrix import compare, gather_limited, matrix_proxy, run_large


async def test_large_results_reach_fastmcp_and_the_inspector(tmp_path: Path) -> None:
    expected = {
        (client, era, size): outcome
        for (client, era), outcomes in LARGE.items()
        for size, outcome in zip(LARGE_SIZES, outcomes, strict=True)
    }
    measured = list(expected)
    # A 20 MB answer on a loaded CI box can miss the default 2 s window: widen it here.
    async with matrix_proxy(tmp_path, sse={"json_answer_window_ms": 15000}) as proxy:
        observed = await gather_limited(
            *(run_large(proxy, client, era, size, tmp_path) for client, era, size in measured)
        )
    got, report = compare(expected, measured, observed)
    print(report)
    assert got == expected, report
