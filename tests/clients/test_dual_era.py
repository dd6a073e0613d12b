"""``dual_era: legacy`` (per server; ``modern.dual_era`` for all): a client that speaks both
eras and would be served 2026-07-28 (fastmcp 4.2 by default, the Python SDK and the
TypeScript SDK 2.x in ``auto`` mode) is served 2025-11-25 instead and resumes through a
cut, where the same client on a server left at ``modern`` loses its call (SEP-2575). The
proxy tells the operator: a ``server_eras`` log line per server at start, and ``eras`` per
upstream in ``/status.json`` (and on ``/status``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from tests.clients.matrix import PROXY_SECTIONS, SERVER, compare, gather_limited, run_cell
from tests.support import log_events, run_proxy_on


def config() -> dict[str, Any]:
    """Two servers of the matrix fixture: ``resumable`` serves dual-era clients legacy."""
    return {
        "listen": {"host": "127.0.0.1", "port": 0},
        "upstream": {"stop_grace_seconds": 3},
        "servers": {
            "resumable": {"command": SERVER, "dual_era": "legacy"},
            "plain": {"command": SERVER},
        },
        "log": {"format": "json", "level": "debug"},
        **PROXY_SECTIONS,
    }


async def test_dual_era_clients_resume_on_a_server_that_serves_them_legacy(
    tmp_path: Path,
) -> None:
    expected = {
        ("fastmcp", "resumable"): "exact",
        ("python-sdk", "resumable"): "exact",
        ("ts-sdk-2", "resumable"): "exact",
        ("fastmcp", "plain"): "failed",
    }
    cells = list(expected)
    async with run_proxy_on(tmp_path, config()) as proxy:
        observed = await gather_limited(
            *(
                run_cell(proxy, client, "auto", 1, tmp_path, path=f"/servers/{server}/mcp")
                for client, server in cells
            )
        )
        told = {entry["server"]: entry for entry in log_events(proxy.log_text(), "server_eras")}
        async with aiohttp.ClientSession() as http:
            async with http.get(proxy.base + "/status.json") as resp:
                status = await resp.json()
            async with http.get(proxy.base + "/status") as resp:
                page = await resp.text()
    got, report = compare(expected, cells, observed)
    assert got == expected, report

    assert told["resumable"]["dual_era"] == "legacy"
    assert "served 2025-11-25" in told["resumable"]["resumption"]
    assert told["plain"]["dual_era"] == "modern"
    assert "loses a call on a broken stream" in told["plain"]["resumption"]
    shown = {upstream["name"]: upstream["eras"] for upstream in status["upstreams"]}
    assert shown == {
        name: {"dual_era": entry["dual_era"], "resumption": entry["resumption"]}
        for name, entry in told.items()
    }
    assert "dual-era clients" in page and "legacy: a client that speaks both eras" in page
