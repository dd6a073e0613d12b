"""The client matrix, Python clients: the official Python SDK (``mcp`` 2.3), fastmcp 4.2 and
the ``connect`` shim (driven by the Python SDK's stdio client), each in every era it speaks,
through 1, 2, 3 and 10 cuts of a call streaming 60 progress notifications (tests/clients/matrix.py).
Each cell's outcome must be the one tests/clients/expected.py (and docs/clients.md) states.

The Python SDK's flaw shows from 2 cuts: its ``_handle_reconnection`` retries a resumed
stream that broke with the ``Last-Event-ID`` it started from (duplicates), and gives up
after ``MAX_RECONNECTION_ATTEMPTS = 2`` (fastmcp uses it); at 2026-07-28 there is no
resumption.
"""

from __future__ import annotations

from pathlib import Path

from tests.clients.expected import cells
from tests.clients.matrix import compare, gather_limited, matrix_proxy, run_cell

CLIENTS = ("python-sdk", "fastmcp", "shim")


async def test_each_python_client_resumes_as_the_table_says(tmp_path: Path) -> None:
    expected = cells(CLIENTS)
    measured = list(expected)
    async with matrix_proxy(tmp_path) as proxy:
        observed = await gather_limited(
            *(run_cell(proxy, client, era, cuts, tmp_path) for client, era, cuts in measured)
        )
    got, report = compare(expected, measured, observed)
    print(report)
    assert got == expected, report
