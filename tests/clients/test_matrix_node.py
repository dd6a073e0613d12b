"""The client matrix, Node clients: the TypeScript SDK 1.x and 2.x and the MCP Inspector 2.12
CLI, each in every era it speaks, through 1, 2, 3 and 10 cuts of a call streaming 60 progress
notifications (tests/clients/matrix.py). Each cell's outcome must be the one
tests/clients/expected.py (and docs/clients.md) states.

The TypeScript SDK 2.x at 2026-07-28 does not notice a broken response stream: the call
fails at its request timeout (30 s here, 60 s by default). The Inspector at 2026-07-28
declares the Tasks extension, so its call becomes a task; a cut of a ``tasks/get`` poll
fails the CLI's call instead of being polled again.
"""

from __future__ import annotations

from pathlib import Path

from tests.clients.expected import cells
from tests.clients.matrix import compare, gather_limited, matrix_proxy, run_cell

CLIENTS = ("ts-sdk-1", "ts-sdk-2", "inspector")


async def test_each_node_client_resumes_as_the_table_says(tmp_path: Path) -> None:
    expected = cells(CLIENTS)
    # The cells that wait for the request timeout first, side by side; node clients mostly
    # wait, so four run at once.
    measured = sorted(expected, key=lambda cell: cell[:2] != ("ts-sdk-2", "modern"))
    async with matrix_proxy(tmp_path) as proxy:
        observed = await gather_limited(
            *(run_cell(proxy, client, era, cuts, tmp_path) for client, era, cuts in measured),
            limit=4,
        )
    got, report = compare(expected, measured, observed)
    print(report)
    assert got == expected, report
