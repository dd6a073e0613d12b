"""Benchmark runner: each contender on a free 127.0.0.1 port, the load phases, one markdown table.

``.venv/bin/python bench/run.py [--quick] [--contenders direct,proxy+sdk,proxy+raw] [--reps R]``

For each contender and each repetition: start it, wait for its port, run ``bench/load.py``
against it (a separate process, so its CPU share is its own), stop it (SIGTERM, then wait).
The table shows the median over repetitions. See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
LEGACY = ROOT / "tests" / "fixtures" / "legacy_server.py"
SERVE_HTTP = ROOT / "tests" / "fixtures" / "serve_http.py"
FLOOD = ROOT / "tests" / "fixtures" / "flood_server.py"
PYTHON = sys.executable
PROXY = str(ROOT / ".venv" / "bin" / "mcp-resume-proxy")
HOST = "127.0.0.1"


@dataclass(frozen=True)
class Contender:
    name: str
    burst_tool: str
    replay: bool
    server: list[str]  # for a proxy: the upstream command; else the HTTP server command

    def command(self, port: int) -> list[str]:
        if self.name.startswith("proxy"):
            return [PROXY, "--port", str(port), "--log-level", "warning", "--", *self.server]
        return [*self.server, "--port", str(port)]


CONTENDERS: dict[str, Contender] = {
    c.name: c
    for c in [
        Contender("direct", "burst", False, [PYTHON, str(SERVE_HTTP), "--fixture", str(LEGACY)]),
        Contender("proxy+sdk", "burst", True, [PYTHON, str(LEGACY)]),
        Contender("proxy+raw", "flood", True, [PYTHON, str(FLOOD)]),
    ]
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"contender exited early with status {proc.returncode}")
        try:
            with socket.create_connection((HOST, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} not open after {timeout} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its own group (start_new_session): ours only
        proc.wait(timeout=5)


def run_once(contender: Contender, load_args: list[str]) -> list[dict[str, Any]]:
    port = free_port()
    proc = subprocess.Popen(
        contender.command(port), cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL
    )
    try:
        wait_for_port(port, proc)
        cmd = [
            PYTHON,
            str(BENCH / "load.py"),
            "--url",
            f"http://{HOST}:{port}/mcp",
            "--pid",
            str(proc.pid),
            "--burst-tool",
            contender.burst_tool,
            "--json",
            *load_args,
            *(["--replay"] if contender.replay else []),
        ]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600)
        phases: list[dict[str, Any]] = json.loads(out.stdout)
        return phases
    except subprocess.CalledProcessError as e:
        raise RuntimeError(f"{contender.name}: load.py failed:\n{e.stderr}") from e
    finally:
        stop(proc)


def stdio_emission(server: list[str], tool: str, n: int, size: int = 200) -> float:
    """Notifications/s the upstream alone writes to a pipe (no HTTP, no proxy): the ceiling."""
    proc = subprocess.Popen(
        server, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:

        def send(msg: dict[str, Any]) -> None:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(msg).encode() + b"\n")
            proc.stdin.flush()

        init_params = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "bench-emission", "version": "1"},
        }
        send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init_params})
        proc.stdout.readline()
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        call_params = {
            "name": tool,
            "arguments": {"n": n, "size": size},
            "_meta": {"progressToken": 1},
        }
        t0 = time.perf_counter()
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call_params})
        seen = 0
        for _ in range(n + 100):  # bounded: n notifications, the response, a little slack
            line = proc.stdout.readline()
            if not line or b'"id":2' in line.replace(b" ", b""):
                break
            seen += b"notifications/progress" in line
        wall = time.perf_counter() - t0
        if seen != n:
            raise RuntimeError(f"stdio emission of {server[-1]}: {seen} of {n} notifications")
        return seen / wall
    finally:
        proc.stdin.close()
        stop(proc)


def summarize(runs: list[list[dict[str, Any]]]) -> dict[str, float | None]:
    """One row: per-run figures, then the median over runs."""
    rows: list[dict[str, float | None]] = []
    for phases in runs:
        by = {p["name"]: p for p in phases}
        lat, thr, burst = by["latency"], by["throughput"], by["burst"]
        calls = lat["metrics"]["calls"] + thr["metrics"]["calls"]
        replay = by.get("replay")
        rows.append(
            {
                "p50_ms": lat["metrics"]["p50_ms"],
                "p99_ms": lat["metrics"]["p99_ms"],
                "calls_per_s": thr["metrics"]["calls_per_s"],
                "sessions": thr["metrics"]["sessions"],
                "notif_per_s": burst["metrics"]["notif_per_s"],
                "first_ms": burst["metrics"]["first_ms"],
                "replay_ms": replay["metrics"]["replay_ms"] if replay else None,
                "cpu_us_call": (lat["server_cpu_s"] + thr["server_cpu_s"]) / calls * 1e6,
                "cpu_us_notif": burst["server_cpu_s"] / burst["metrics"]["notifications"] * 1e6,
                "rss_mb": max(p["server_rss_mb"] for p in phases),
                "load_cpu": max(p["client_cpu_share"] for p in phases),
            }
        )
    return {
        key: (statistics.median(v for r in rows if (v := r[key]) is not None))
        if rows[0][key] is not None
        else None
        for key in rows[0]
    }


def fmt(value: float | None, digits: int) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def table(results: dict[str, dict[str, float | None]]) -> str:
    sessions = int(next(iter(results.values()))["sessions"] or 0)
    lines = [
        f"| contender | p50 ms | p99 ms | calls/s ({sessions} sessions) | burst notif/s "
        "| first ms | replay ms | proxy CPU µs/call | CPU µs/notification | RSS MB "
        "| load client CPU |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {fmt(r['p50_ms'], 3)} | {fmt(r['p99_ms'], 3)} "
            f"| {fmt(r['calls_per_s'], 0)} | {fmt(r['notif_per_s'], 0)} "
            f"| {fmt(r['first_ms'], 1)} | {fmt(r['replay_ms'], 1)} "
            f"| {fmt(r['cpu_us_call'], 0)} | {fmt(r['cpu_us_notif'], 1)} "
            f"| {fmt(r['rss_mb'], 1)} | {fmt((r['load_cpu'] or 0) * 100, 0)} % |"
        )
    return "\n".join(lines)


def machine_line(argv: list[str]) -> str:
    model = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{now} · nproc {os.cpu_count()} · {model} · Python {platform.python_version()} · "
        f"`{shlex.join(argv)}`"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: small N, T, R")
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help="comma-separated")
    parser.add_argument("--reps", type=int, help="repetitions (default 2, --quick 1)")
    parser.add_argument("--calls", type=int, help="latency calls (default 500, --quick 100)")
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--seconds", type=float, help="throughput seconds (5, --quick 1)")
    parser.add_argument("--notifications", type=int, help="burst size (10000, --quick 2000)")
    parser.add_argument("--json-out", type=Path, help="also write the raw phase results here")
    args = parser.parse_args()
    names = [n.strip() for n in args.contenders.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown:
        sys.exit(f"unknown contenders {unknown}; known: {', '.join(CONTENDERS)}")
    reps = args.reps or (1 if args.quick else 2)
    load_args = [
        "--calls",
        str(args.calls or (100 if args.quick else 500)),
        "--sessions",
        str(args.sessions),
        "--seconds",
        str(args.seconds or (1.0 if args.quick else 5.0)),
        "--notifications",
        str(args.notifications or (2000 if args.quick else 10_000)),
    ]

    raw: dict[str, list[list[dict[str, Any]]]] = {}
    for name in names:
        for rep in range(reps):
            print(f"{name}: run {rep + 1}/{reps}", file=sys.stderr, flush=True)
            raw.setdefault(name, []).append(run_once(CONTENDERS[name], load_args))
    if args.json_out:
        args.json_out.write_text(json.dumps(raw, indent=1))
    n = int(load_args[load_args.index("--notifications") + 1])
    emission = {
        Path(server[-1]).name: statistics.median(
            stdio_emission(server, tool, n) for _ in range(reps)
        )
        for server, tool in [
            (CONTENDERS["proxy+sdk"].server, "burst"),
            (CONTENDERS["proxy+raw"].server, "flood"),
        ]
    }
    print(table({name: summarize(runs) for name, runs in raw.items()}))
    print()
    print(
        f"Upstream alone over stdio ({n:,} notifications, read straight from its pipe): "
        + ", ".join(f"{name} {rate:,.0f}/s" for name, rate in emission.items())
    )
    print()
    print(machine_line([Path(PYTHON).name, *sys.argv]))


if __name__ == "__main__":
    main()
