"""proxy/core/dual_era.py: which server/discover is refused so that a dual-era client falls
back to 2025-11-25, and what the operator is told about each server's clients."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.dual_era import declares_tasks, discover_refused, eras_served
from proxy.core.era import META_CAPABILITIES, META_VERSION, TASKS_EXTENSION


def request(method: str, extensions: dict[str, Any] | None = None) -> dict[str, Any]:
    caps: dict[str, Any] = {} if extensions is None else {"extensions": extensions}
    meta = {META_VERSION: "2026-07-28", META_CAPABILITIES: caps}
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": meta}}


@pytest.mark.parametrize(
    ("raw", "dual_era", "tasks_enabled", "refused"),
    [
        (request("server/discover"), "modern", True, False),
        (request("server/discover"), "legacy", True, True),
        (request("server/discover", {"io.modelcontextprotocol/skills": {}}), "legacy", True, True),
        # A client that can make its calls tasks is served 2026-07-28 ...
        (request("server/discover", {TASKS_EXTENSION: {}}), "legacy", True, False),
        # ... unless the proxy has no tasks to give it.
        (request("server/discover", {TASKS_EXTENSION: {}}), "legacy", False, True),
        # A client pinned to 2026-07-28 sends no discover: its requests are served.
        (request("tools/call"), "legacy", True, False),
        (request("tools/list"), "legacy", False, False),
    ],
)
def test_only_a_discover_without_tasks_is_refused_under_legacy(
    raw: dict[str, Any], dual_era: str, tasks_enabled: bool, refused: bool
) -> None:
    assert discover_refused(raw, dual_era, tasks_enabled) is refused


@pytest.mark.parametrize(
    "raw",
    [
        {"method": "server/discover"},
        {"method": "server/discover", "params": None},
        {"method": "server/discover", "params": {"_meta": []}},
        {"method": "server/discover", "params": {"_meta": {META_CAPABILITIES: "x"}}},
        {"method": "server/discover", "params": {"_meta": {META_CAPABILITIES: {"extensions": 1}}}},
    ],
)
def test_malformed_capabilities_declare_nothing(raw: dict[str, Any]) -> None:
    assert not declares_tasks(raw)


def test_the_operator_is_told_what_dual_era_clients_get() -> None:
    modern = eras_served(True, "modern", True)
    assert modern["dual_era"] == "modern"
    assert (
        "loses a call on a broken stream unless it uses the Tasks extension"
        in (modern["resumption"])
    )
    assert "dual_era: legacy" in modern["resumption"]
    legacy = eras_served(True, "legacy", True)
    assert legacy["dual_era"] == "legacy"
    assert (
        "served 2025-11-25 (2026-07-28 if it declares the Tasks extension)"
        in (legacy["resumption"])
    )
    assert "tasks.enabled is false" in eras_served(True, "legacy", False)["resumption"]
    off = eras_served(False, "modern", True)
    assert off["dual_era"] == "legacy"
    assert off["resumption"].startswith("modern.enabled is false")
