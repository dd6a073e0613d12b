"""Issue 20, item 5: what sessions nobody closes cost, with and without
``upstream.stop_idle_seconds``.

The MCP Inspector CLI never sends ``DELETE``: each call leaves a session, and with it a
server process, until ``sessions.idle_timeout_seconds`` (600 s). This runs N Inspector CLI
calls (``mcp-inspector --cli URL --method tools/call --tool-name echo --tool-arg
message=hi``, one after the other, as a user trying a server does) against the proxy in
front of ``@modelcontextprotocol/server-everything`` on stdio (``.tools/bin/server-everything
stdio``), once without the setting and once with it, and prints for each: the server
processes under the proxy and their total RSS right after the calls, the same once the idle
time has passed (with the setting: when none is left, at most the idle time plus 60 s;
without: after as long), the sessions the proxy still holds, and whether one more call works.

    .venv/bin/python bench/idle_stop.py                 # 15 calls, stop_idle_seconds: 10
    .venv/bin/python bench/idle_stop.py --calls 5 --idle 2

Needs scripts/install-node-tools.sh and scripts/install-inspector.sh. Every process it
starts is stopped before it ends (the proxy by SIGTERM, which stops its servers).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import descendants, log_events, stop_proxy, wait_listening  # noqa: E402

INSPECTOR = ROOT / ".tools" / "inspector" / "node_modules" / ".bin" / "mcp-inspector"
NODE_BIN = ROOT / ".tools" / "node_modules" / ".bin"
EVERYTHING = ROOT / ".tools" / "bin" / "server-everything"
SETTLE_S = 60.0  # beyond the idle time, how long the processes may take to go


@dataclass
class Sample:
    processes: int  # the proxy's live descendants: server-everything (node) processes
    rss_mib: float  # their RSS together

    def cell(self) -> str:
        return f"{self.processes} / {self.rss_mib:,.0f} MiB"


def sample(proxy_pid: int) -> Sample:
    pids = descendants(proxy_pid)
    return Sample(len(pids), sum(_rss_kib(pid) for pid in pids) / 1024)


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:  # gone meanwhile
        pass
    return 0


async def inspector_call(url: str) -> bool:
    env = {**os.environ, "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    argv = [str(INSPECTOR), "--cli", url, "--method", "tools/call", "--tool-name", "echo"]
    argv += ["--tool-arg", "message=hi"]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        return False
    result = json.loads(out)
    return "hi" in json.dumps(result.get("content"))


async def sessions_held(base: str) -> int:
    async with aiohttp.ClientSession() as http, http.get(base + "/status.json") as resp:
        page: dict[str, Any] = await resp.json()
    return int(page["sessions_total"])


async def run(calls: int, idle: float | None, wait: float | None, workdir: Path) -> dict[str, Any]:
    """One proxy; ``idle``: stop_idle_seconds (None: unset); ``wait``: how long to wait
    after the calls (None: until no process is left)."""
    upstream: dict[str, Any] = {"command": [str(EVERYTHING), "stdio"]}
    if idle is not None:
        upstream["stop_idle_seconds"] = idle
    config = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "upstream": upstream,
        "log": {"format": "json", "level": "info"},
    }
    name = "with" if idle is not None else "without"
    config_path, log_path = workdir / f"{name}.yaml", workdir / f"{name}.log"
    config_path.write_text(yaml.safe_dump(config))
    with log_path.open("wb") as log_file:
        proxy = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "proxy", "--config", str(config_path),
            stdout=log_file, stderr=log_file, cwd=str(ROOT),
        )  # fmt: skip
    try:
        port = await wait_listening(proxy, log_path, "the proxy")
        base = f"http://127.0.0.1:{port}"
        ok = [await inspector_call(base + "/mcp") for _ in range(calls)]
        done = time.monotonic()
        after_calls = sample(proxy.pid)
        if wait is None:
            deadline = done + (idle or 0) + SETTLE_S
            while sample(proxy.pid).processes and time.monotonic() < deadline:
                await asyncio.sleep(0.25)
        else:
            await asyncio.sleep(max(0.0, done + wait - time.monotonic()))
        waited = time.monotonic() - done
        after_idle = sample(proxy.pid)
        held = await sessions_held(base)
        next_ok = await inspector_call(base + "/mcp")
        stops = len(log_events(log_path.read_text(errors="replace"), "upstream_idle_stopped"))
    finally:
        await stop_proxy(proxy)
    return {
        "setting": f"stop_idle_seconds: {idle:g}" if idle is not None else "unset",
        "calls_ok": f"{sum(ok)}/{calls}",
        "after_calls": after_calls,
        "after_idle": after_idle,
        "waited_s": waited,
        "sessions": held,
        "idle_stops": stops,
        "next_call": "ok" if next_ok else "FAILED",
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| upstream setting | calls ok | processes / RSS after the calls | waited | "
        "processes / RSS after it | sessions held | idle stops | next call |"
    )
    lines = [head, "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['setting']} | {r['calls_ok']} | {r['after_calls'].cell()} | "
            f"{r['waited_s']:.1f} s | {r['after_idle'].cell()} | {r['sessions']} | "
            f"{r['idle_stops']} | {r['next_call']} |"
        )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--idle", type=float, default=10.0, help="stop_idle_seconds")
    args = parser.parse_args()
    for path, what in ((INSPECTOR, "install-inspector.sh"), (EVERYTHING, "install-node-tools.sh")):
        if not path.exists():
            sys.exit(f"{path} is missing: run scripts/{what}")
    with tempfile.TemporaryDirectory(prefix="bench-idle-") as tmp:
        workdir = Path(tmp)
        with_it = await run(args.calls, args.idle, None, workdir)
        without = await run(args.calls, None, with_it["waited_s"], workdir)
    print(table([without, with_it]))


if __name__ == "__main__":
    asyncio.run(main())
