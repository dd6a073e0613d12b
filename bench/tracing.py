"""What tracing costs (issue 22): the proxy in front of the raw emitter, tracing off
(the default) against tracing on (every call sampled, spans exported over OTLP/HTTP to a
sink that accepts them), interleaved per repetition so a shared machine's drift cancels.

    .venv/bin/python bench/tracing.py            # 3 repetitions, both eras
    .venv/bin/python bench/tracing.py --reps 5 --era legacy
    .venv/bin/python bench/tracing.py --before bd74e52   # also proxy/ as of that commit

``--before COMMIT`` adds a third contender, ``proxy/`` as of a commit without tracing
(unpacked by ``git archive``), to show that off costs nothing against no code at all.

Each start runs ``bench/load.py``'s latency (500 calls one at a time) and throughput
(8 sessions for 5 s) phases; the table shows medians: p50, p99, calls/s, and the proxy's
own CPU per call (utime+stime over both phases ÷ calls). The sink is a separate process
(its CPU is not the proxy's). ``--sink PORT`` runs the sink alone.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from bench.contenders import (  # noqa: E402
    PROXY_SRC_ENV,
    RAW,
    config_file,
    free_port,
    proxy_command,
    running,
)
from bench.provenance import archive_proxy  # noqa: E402

os.environ.setdefault(PROXY_SRC_ENV, str(HERE.parent))  # this tree's proxy, not an install
MODES = {
    "before": "",  # --before: proxy/ as of a commit without tracing
    "off": "tracing:\n  enabled: false\n",
    "on": "tracing:\n  enabled: true\n  endpoint: http://127.0.0.1:{sink}/v1/traces\n",
}
ERAS = {"legacy": "", "modern": "modern:\n  enabled: true\n"}


def sink(port: int) -> None:
    """An OTLP/HTTP receiver that takes every export and keeps nothing."""
    from aiohttp import web

    async def export(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", export)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def measure(
    mode: str, era: str, sink_port: int, calls: int, seconds: float, before: Path | None
) -> dict[str, float]:
    port = free_port()
    config = config_file(MODES[mode].format(sink=sink_port) + ERAS[era])
    src = str(before if mode == "before" else HERE.parent)
    os.environ[PROXY_SRC_ENV] = src
    argv = [*proxy_command(), "--port", str(port), "--log-level", "warning"]
    argv += ["--config", str(config), "--", *RAW]
    try:
        with running(argv, port) as proc:
            cmd = [sys.executable, str(HERE / "load.py"), "--url", f"http://127.0.0.1:{port}/mcp"]
            cmd += ["--pid", str(proc.pid), "--json", "--era", era, "--calls", str(calls)]
            cmd += ["--seconds", str(seconds), "--burst-tool", "flood", "--notifications", "10"]
            cmd += ["--burst-reps", "1"]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    finally:
        config.unlink()
    by = {p["name"]: p for p in json.loads(out.stdout)}
    lat, thr = by["latency"], by["throughput"]
    done = lat["metrics"]["calls"] + thr["metrics"]["calls"]
    return {
        "p50_ms": lat["metrics"]["p50_ms"],
        "p99_ms": lat["metrics"]["p99_ms"],
        "calls_per_s": thr["metrics"]["calls_per_s"],
        "cpu_us_per_call": (lat["server_cpu_s"] + thr["server_cpu_s"]) / done * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--era", choices=[*ERAS, "both"], default="both")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--before", metavar="COMMIT", help="also proxy/ as of COMMIT")
    parser.add_argument("--sink", type=int, help="run only the OTLP sink on this port")
    args = parser.parse_args()
    if args.sink is not None:
        sink(args.sink)
        return
    eras = list(ERAS) if args.era == "both" else [args.era]
    modes = [m for m in MODES if args.before or m != "before"]
    before: Path | None = None
    if args.before:
        before = Path(tempfile.mkdtemp(prefix="bench-before-"))
        archive_proxy(args.before, before)
    sink_port = free_port()
    argv = [sys.executable, str(Path(__file__).resolve()), "--sink", str(sink_port)]
    runs: dict[tuple[str, str], list[dict[str, float]]] = {}
    try:
        with running(argv, sink_port):
            for _ in range(args.reps):
                for era in eras:
                    for mode in modes:
                        got = measure(mode, era, sink_port, args.calls, args.seconds, before)
                        runs.setdefault((era, mode), []).append(got)
    finally:
        if before is not None:
            shutil.rmtree(before)
    keys = ["p50_ms", "p99_ms", "calls_per_s", "cpu_us_per_call"]
    print("| era | tracing | p50 ms | p99 ms | calls/s (8 sessions) | proxy CPU µs/call |")
    print("|---|---|---|---|---|---|")
    for (era, mode), found in runs.items():
        med: dict[str, Any] = {k: statistics.median(r[k] for r in found) for k in keys}
        print(
            f"| {era} | {mode} | {med['p50_ms']:.3f} | {med['p99_ms']:.3f} | "
            f"{med['calls_per_s']:.0f} | {med['cpu_us_per_call']:.0f} |"
        )


if __name__ == "__main__":
    main()
