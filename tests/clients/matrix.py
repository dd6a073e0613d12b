"""Running one cell of the client matrix: a real client, through a cutting relay
(tests/cut_proxy.py), calling a tool of the proxy in front of tests/fixtures/matrix_server.py.

A cell is (client, era, cuts). Its driver (one per client in this folder, see driver_io.py)
calls ``slow`` with :data:`STEPS` steps (one ``notifications/progress`` each); the relay
cuts the client's connection ``cuts`` times, spread over the bytes of the call's progress,
counted from the first progress notification (so the client's handshake is never cut); a
call that became a task (``modern+tasks``) is cut on its ``tasks/get`` polls instead.
The cell's :func:`outcome` is what the client handed its user, against what the server sent:

- ``exact``: every progress once, in order, and the result;
- ``duplicates``: the result, and some progress more than once;
- ``out of order``: the result, each progress once, not in order;
- ``lost``: the result, some progress missing;
- ``completed``: the result; the client does not show progress (the Inspector CLI);
- ``failed``: no result (the error is in the cell's detail);
- ``not cut``: fewer cuts landed than asked, so the cell measured nothing (never expected).

The expected table is tests/clients/expected.py; docs/clients.md shows it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tests.cut_proxy import CutProxy
from tests.e2e.node_tools import group_gone, node_binary, node_modules, stop_group
from tests.support import ROOT, RunningProxy, run_proxy

SERVER: Final = [sys.executable, str(ROOT / "tests" / "fixtures" / "matrix_server.py")]
STEPS: Final = 60
STEP_DELAY_S: Final = 0.02
PROGRESS_MARKER: Final = b"notifications/progress"
TASK_MARKER: Final = b'"task"'  # a call's answer that made it a task (resultType)
ERAS: Final = ("legacy", "modern", "modern+tasks")
# A progress event of `slow` is about 130 bytes on the wire (more with a modern envelope):
# the cuts are spread over the first 6,000 bytes after the first one, well inside the call.
CUT_SPAN_BYTES: Final = 6000
# With Tasks they fall on the tasks/get polls, about 200 bytes each (50 ms apart here): the
# first 2,000 bytes after the answer that made the call a task, well before it ends.
TASK_CUT_SPAN_BYTES: Final = 2000
DRIVER_DEADLINE_S: Final = 90.0
LARGE_TIMEOUT_S: Final = 60.0  # the clients' own default: a 20 MB result on a busy machine
PARALLEL_CELLS: Final = 3
TS_CLIENT2_MODULES: Final = ROOT / ".tools" / "ts-client2" / "node_modules"
INSPECTOR: Final = ROOT / ".tools" / "inspector" / "node_modules" / ".bin" / "mcp-inspector"

# The proxy of a matrix module: short retry: so that each reconnection waits 0.1 s; a call
# of a client that declares the Tasks extension becomes a task at once, polled every 50 ms.
PROXY_SECTIONS: Final[dict[str, dict[str, Any]]] = {
    "sse": {"retry_ms": 100},
    "tasks": {"mode": "always", "poll_interval_ms": 50},
}


@dataclass(frozen=True)
class Observed:
    outcome: str
    detail: str  # the error, or what arrived, for the failure message


def cut_offsets(cuts: int, span: int = CUT_SPAN_BYTES) -> list[int]:
    """``cuts`` byte offsets spread evenly over ``span`` bytes."""
    return [round((i + 0.5) * span / cuts) for i in range(cuts)]


def outcome(lines: list[dict[str, Any]], steps: int, *, shows_progress: bool = True) -> Observed:
    """What a driver's output says happened to a call of ``slow`` with ``steps`` steps."""
    errors = [str(line["error"]) for line in lines if "error" in line]
    results = [line for line in lines if "result" in line]
    values = [int(line["progress"]) for line in lines if "progress" in line]
    summary = f"{len(values)} progress for {steps}"
    if errors or not results:
        return Observed("failed", errors[0] if errors else f"no result; {summary}")
    if results[0]["result"] != f"done {steps}":
        return Observed("failed", f"wrong result {results[0]['result']!r}")
    if not shows_progress:
        return Observed("completed", summary)
    if set(values) != set(range(1, steps + 1)):
        return Observed(
            "lost", f"{summary}, missing {sorted(set(range(1, steps + 1)) - set(values))}"
        )
    if len(values) > steps:
        return Observed("duplicates", f"{summary} ({len(values) - steps} repeated)")
    if values != sorted(values):
        return Observed("out of order", summary)
    return Observed("exact", summary)


def driver_argv(client: str, era: str, url: str, tool: str, args: dict[str, Any]) -> list[str]:
    """The command line that runs ``client``'s driver (driver_io.py's interface)."""
    arguments = json.dumps(args)
    if client in ("python-sdk", "fastmcp", "shim"):
        module = {"python-sdk": "py_sdk", "fastmcp": "fastmcp_client", "shim": "shim"}[client]
        driver_era = "legacy" if client == "shim" else era
        return [sys.executable, "-m", f"tests.clients.{module}", url, tool, arguments,
                "--era", driver_era]  # fmt: skip
    if client in ("ts-sdk-1", "ts-sdk-2"):
        script = str(ROOT / "tests" / "clients" / "ts.mjs")
        sdk = client[-1]
        return [str(node_binary()), script, url, tool, arguments, "--era", era, "--sdk", sdk]
    if client == "inspector":
        return inspector_argv(era, url, tool, args)
    raise ValueError(f"no driver for {client}")


def inspector_argv(era: str, url: str, tool: str, args: dict[str, Any]) -> list[str]:
    """``tests/clients/inspector.py``, which runs the Inspector CLI and translates its output."""
    return [sys.executable, "-m", "tests.clients.inspector", url, tool, json.dumps(args),
            "--era", era]  # fmt: skip


def driver_env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": str(ROOT),
        "MCP_TOOLS_NODE_MODULES": str(node_modules()),
        "MCP_TS_CLIENT2_MODULES": str(TS_CLIENT2_MODULES),
        "PATH": f"{node_binary().parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }


async def run_driver(argv: list[str], stderr_path: Path) -> list[dict[str, Any]]:
    """Run a driver to its end (its own process group, always stopped); its JSON lines."""
    with stderr_path.open("wb") as stderr:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
            cwd=str(ROOT),
            env=driver_env(),
            start_new_session=True,
        )
    lines: list[dict[str, Any]] = []
    try:
        assert process.stdout is not None
        async with asyncio.timeout(DRIVER_DEADLINE_S):
            async for raw in process.stdout:
                if raw.strip():
                    lines.append(json.loads(raw))
            await process.wait()
    except TimeoutError:
        lines.append({"error": f"the driver did not finish in {DRIVER_DEADLINE_S}s"})
    finally:
        await stop_group(process)
        await group_gone(process.pid, f"the driver {argv[:3]}")
    return lines


async def run_cell(
    proxy: RunningProxy, client: str, era: str, cuts: int, workdir: Path, *, path: str = "/mcp"
) -> Observed:
    """One cell: ``client`` at ``era`` calls ``slow`` through a relay that cuts ``cuts`` times."""
    relay = CutProxy(proxy.port)
    await relay.start()
    try:
        if era == "modern+tasks":
            relay.schedule_cuts(cut_offsets(cuts, TASK_CUT_SPAN_BYTES), after=TASK_MARKER)
        else:
            relay.schedule_cuts(cut_offsets(cuts), after=PROGRESS_MARKER)
        args = {"steps": STEPS, "delay": STEP_DELAY_S}
        argv = driver_argv(client, era.removesuffix("+tasks"), relay.url(path), "slow", args)
        stderr = workdir / f"{client}-{era}-{cuts}.stderr"
        lines = await run_driver(argv, stderr)
    finally:
        await relay.stop()
    observed = outcome(lines, STEPS, shows_progress=client != "inspector")
    if relay.cuts < cuts and observed.outcome != "failed":
        return Observed("not cut", f"{relay.cuts} of {cuts} cuts landed; {observed.detail}")
    return observed


async def run_large(
    proxy: RunningProxy, client: str, era: str, size: int, workdir: Path
) -> Observed:
    """``client`` at ``era`` calls ``large`` for a result of ``size`` bytes, no cuts."""
    argv = driver_argv(client, era.removesuffix("+tasks"), proxy.url, "large", {"bytes": size})
    argv += ["--timeout", str(LARGE_TIMEOUT_S)]
    lines = await run_driver(argv, workdir / f"{client}-{era}-large-{size}.stderr")
    errors = [str(line["error"]) for line in lines if "error" in line]
    results = [line for line in lines if "result" in line]
    if errors or not results:
        return Observed("failed", errors[0] if errors else "no result")
    if results[0]["bytes"] != size:
        return Observed("failed", f"{results[0]['bytes']} bytes for {size}")
    return Observed("ok", f"{size} bytes")


def matches(expected: str, outcome: str) -> bool:
    """``outcome`` is the expected one, or one of ``"A or B"``."""
    return outcome in expected.split(" or ")


def compare(
    expected: dict[Any, str], cells: list[Any], observed: list[Observed]
) -> tuple[dict[Any, str], str]:
    """The outcomes by cell (a cell that got one of its expected outcomes: the expected
    text itself), and a report of every cell: expected, got, detail."""
    got = {
        cell: expected[cell] if matches(expected[cell], seen.outcome) else seen.outcome
        for cell, seen in zip(cells, observed, strict=True)
    }
    report = "\n".join(
        f"{'  ' if got[cell] == expected[cell] else '!!'} {cell}: expected {expected[cell]}, "
        f"got {seen.outcome} ({seen.detail})"
        for cell, seen in zip(cells, observed, strict=True)
    )
    return got, report


async def gather_limited(*jobs: Any, limit: int = PARALLEL_CELLS) -> list[Any]:
    """Run the coroutines ``jobs``, ``limit`` at a time (in the order given), results in
    order."""
    gate = asyncio.Semaphore(limit)

    async def one(job: Any) -> Any:
        async with gate:
            return await job

    return list(await asyncio.gather(*(one(job) for job in jobs)))


@asynccontextmanager
async def matrix_proxy(tmp_path: Path, **sections: dict[str, Any]) -> AsyncIterator[RunningProxy]:
    """The proxy in front of the matrix fixture, with :data:`PROXY_SECTIONS` (and ``sections``)."""
    merged = {key: dict(value) for key, value in PROXY_SECTIONS.items()}
    for key, value in sections.items():
        merged.setdefault(key, {}).update(value)
    async with run_proxy(tmp_path, command=SERVER, **merged) as proxy:
        yield proxy
