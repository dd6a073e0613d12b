"""The official SDK clients in MCP 2026-07-28 ("modern") mode through the proxy's façade.

The proxy (``modern: {enabled: true, pool: {size: 2, isolation: shared}}``, ``tasks: {mode:
after_ms, after_ms: 1000}``) fronts ``tests/fixtures/modern_probe_server.py``, a *legacy*
stdio server that only speaks the ``initialize`` era: the façade has to turn discovery, the
``_meta`` envelope, MRTR, ``subscriptions/listen`` and stream-close cancellation into legacy
traffic. Two real client programs run the same steps against it, each with its SDK's own
modern mode, and print one JSON line per step:

- ``modern_py_client.py``: ``mcp`` 2.3.0, ``Client(..., mode="2026-07-28")``;
- ``ts/modern_client.mjs``: ``@modelcontextprotocol/client`` 2.4.0 (scripts/install-ts-client2.sh)
  with ``versionNegotiation: {mode: {pin: "2026-07-28"}}``, on the Node 22 of .tools.

The steps (see the client programs): ``connect``, ``discover``, ``auto_mode`` (the SDK's
probing mode must pick the modern era), ``tools``, ``prompts``, ``resources``,
``elicitation`` (the fixture's ``ask`` sends ``elicitation/create``; the client answers from
its callback through ``input_required`` / ``inputResponses``), ``slow_call`` (a call longer
than ``tasks.after_ms`` still answers plainly: neither SDK declares the Tasks extension),
``listen_*`` (a change made by
a tool reaches the client as ``notifications/tools/list_changed`` and
``notifications/resources/updated`` on its listen stream), ``cancel`` (the client closes
the stream of a call that hangs; the fixture must see ``notifications/cancelled``) and
``wire`` (only POSTs, no ``Mcp-Session-Id``, the 2026 headers on every request).

Each SDK's run happens once per module (a module-scoped fixture); a test per step reports
its outcome, and the last tests check what the legacy server saw, from the fixture's
shared ``events.jsonl``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from tests.support import ROOT, tail

from .modern_py_client import STEPS  # the steps both client programs run, in order
from .node_tools import group_gone, node_binary, stop_group
from .servers import RunningServer, ServerFactory, proxy_launcher

PROBE_SERVER: Final = ROOT / "tests" / "fixtures" / "modern_probe_server.py"
PY_CLIENT: Final = Path(__file__).with_name("modern_py_client.py")
TS_CLIENT: Final = Path(__file__).with_name("ts") / "modern_client.mjs"
TS_CLIENT2_MODULES: Final = ROOT / ".tools" / "ts-client2" / "node_modules"
TS_CLIENT2_INSTALL: Final = "scripts/install-ts-client2.sh"

SDKS: Final = ("python", "typescript")
MODERN_ONLY_METHODS: Final = {
    "server/discover",
    "subscriptions/listen",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
}
# Every step has its own deadline in the clients (30 s); this bounds the whole run.
CLIENT_DEADLINE_S: Final = 240.0
LOG_TAIL_CHARS: Final = 4000

Line = dict[str, Any]


def proxy_config(state_dir: Path) -> dict[str, Any]:
    """The façade on (its documented keys), in front of the probe fixture."""
    return {
        "upstream": {
            "command": [sys.executable, str(PROBE_SERVER), "--state", str(state_dir)],
            "stop_grace_seconds": 3,
        },
        "log": {"format": "json", "level": "debug"},
        "modern": {"enabled": True, "pool": {"size": 2, "isolation": "shared"}},
        "tasks": {"mode": "after_ms", "after_ms": 1000},
    }


def ts_client2_modules() -> Path:
    """``.tools/ts-client2/node_modules``, holding ``@modelcontextprotocol/client`` 2.x."""
    package = TS_CLIENT2_MODULES / "@modelcontextprotocol" / "client" / "package.json"
    if not package.exists():
        pytest.fail(
            f"@modelcontextprotocol/client is missing ({package}); run {TS_CLIENT2_INSTALL}",
            pytrace=False,
        )
    return TS_CLIENT2_MODULES


def client_command(sdk: str, url: str) -> tuple[list[str], dict[str, str]]:
    if sdk == "python":
        return [sys.executable, str(PY_CLIENT), url], {}
    env = {"MCP_TS_CLIENT2_MODULES": str(ts_client2_modules())}
    return [str(node_binary()), str(TS_CLIENT), url], env


@dataclass(frozen=True)
class ScenarioRun:
    """One client program's run against the proxy, and what the legacy server saw."""

    sdk: str
    lines: list[Line]
    stderr: str
    returncode: int
    upstream_events: list[Line]
    proxy_log: str

    def step(self, name: str) -> Line | None:
        return next((line for line in self.lines if line.get("step") == name), None)

    def describe(self) -> str:
        return (
            f"{self.sdk} client (exit {self.returncode}):\n"
            + "\n".join(json.dumps(line) for line in self.lines)
            + f"\nclient stderr (tail):\n{self.stderr[-LOG_TAIL_CHARS:]}"
            + f"\nproxy log (tail):\n{self.proxy_log[-LOG_TAIL_CHARS:]}"
        )


async def run_client(sdk: str, server: RunningServer, workdir: Path) -> tuple[list[Line], str, int]:
    """Run one client program to completion in its own process group, always stopped."""
    command, env = client_command(sdk, server.url)
    stderr_path = workdir / f"{sdk}-client.stderr"
    lines: list[Line] = []
    with stderr_path.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            cwd=ROOT,
            env={**os.environ, **env},
            start_new_session=True,
        )
    try:
        async with asyncio.timeout(CLIENT_DEADLINE_S):
            assert process.stdout is not None
            async for raw in process.stdout:
                if raw.strip():
                    lines.append(json.loads(raw))
            await process.wait()
    except TimeoutError:
        lines.append({"timeout": f"the client did not finish in {CLIENT_DEADLINE_S}s"})
    finally:
        await stop_group(process)
        await group_gone(process.pid, f"the {sdk} client's processes")
    returncode = process.returncode if process.returncode is not None else -1
    return lines, stderr_path.read_text(errors="replace"), returncode


def read_events(state_dir: Path) -> list[Line]:
    path = state_dir / "events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def run_scenario(sdk: str, workdir: Path) -> ScenarioRun:
    state_dir = workdir / "probe-state"
    factory = ServerFactory(proxy_launcher, workdir)
    try:
        async with factory.start(proxy_config(state_dir)) as server:
            lines, stderr, returncode = await run_client(sdk, server, workdir)
            proxy_log = tail(server.log_path, 4 * LOG_TAIL_CHARS)
    finally:
        factory.kill_leftovers()
    return ScenarioRun(sdk, lines, stderr, returncode, read_events(state_dir), proxy_log)


@pytest.fixture(scope="module", params=SDKS)
def scenario(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> ScenarioRun:
    """The whole run of one SDK's client (once per module and SDK)."""
    sdk: str = request.param
    return asyncio.run(run_scenario(sdk, tmp_path_factory.mktemp(f"modern-{sdk}")))


@pytest.mark.parametrize("step", STEPS)
def test_step(scenario: ScenarioRun, step: str) -> None:
    line = scenario.step(step)
    assert line is not None, f"the client reported no {step!r} step\n{scenario.describe()}"
    assert line["ok"], f"{step}: {line.get('error')}\n{scenario.describe()}"


def test_the_client_ran_to_the_end(scenario: ScenarioRun) -> None:
    assert scenario.lines and scenario.lines[-1] == {"done": True}, scenario.describe()
    assert scenario.returncode == 0, scenario.describe()


def _events(run: ScenarioRun, event: str, **match: Any) -> list[Line]:
    return [
        e
        for e in run.upstream_events
        if e["event"] == event and all(e.get(k) == v for k, v in match.items())
    ]


def test_closing_the_stream_cancelled_the_call_upstream(scenario: ScenarioRun) -> None:
    """Closing the call's response stream (2026-07-28 transports: cancellation) reaches
    the legacy server as ``notifications/cancelled`` for the request it received (2025-11-25
    cancellation), on the upstream session that runs the call; the call never finishes."""
    cancel = scenario.step("cancel")
    assert cancel is not None and "token" in cancel, scenario.describe()
    token = cancel["token"]
    started = _events(scenario, "hang_started", token=token)
    assert len(started) == 1, f"hang {token} started {started}\n{scenario.describe()}"
    pid, request_id = started[0]["pid"], started[0]["request_id"]
    notices = [
        e
        for e in _events(scenario, "received", method="notifications/cancelled", pid=pid)
        if (e.get("params") or {}).get("requestId") == request_id
    ]
    assert len(notices) == 1, (
        f"the upstream of pid {pid} got {len(notices)} notifications/cancelled for request "
        f"{request_id!r}\n{scenario.upstream_events}"
    )
    assert _events(scenario, "hang_cancelled", token=token, pid=pid), scenario.upstream_events
    assert not _events(scenario, "hang_finished", token=token), scenario.upstream_events


def test_the_legacy_server_saw_only_legacy_traffic(scenario: ScenarioRun) -> None:
    """Each upstream session opened with ``initialize`` + ``initialized``; no 2026-only
    method reached the legacy server."""
    received = _events(scenario, "received")
    assert received, scenario.describe()
    by_pid: dict[int, list[str | None]] = {}
    for event in received:
        by_pid.setdefault(event["pid"], []).append(event["method"])
    for pid, methods in by_pid.items():
        assert methods[:2] == ["initialize", "notifications/initialized"], (pid, methods)
        leaked = MODERN_ONLY_METHODS.intersection(m for m in methods if m is not None)
        assert not leaked, f"upstream pid {pid} received {sorted(leaked)}"


def test_the_elicitation_was_answered_the_legacy_way(scenario: ScenarioRun) -> None:
    """The client's ``inputResponses`` reached the legacy server as the JSON-RPC response
    to its ``elicitation/create`` request."""
    answers = [
        e
        for e in _events(scenario, "received", method=None)
        if str(e.get("response_to", "")).startswith("probe-")
    ]
    assert len(answers) == 1, f"responses to the fixture's requests: {answers}"
