"""What answering a lone large answer as JSON costs and buys (issue 20, item 1).

``python bench/large_results.py [--calls 300] [--reps 5] [--json]``

Two proxies in front of ``tests/fixtures/legacy_server.py`` (the ``mcp`` SDK's low-level
server on stdio), the same config but ``sse.json_answer_window_ms``: ``0`` (SSE at once,
the behaviour before issue 20) and the default (2000 ms, answers of 256 KiB or more that
come alone within it go as ``application/json``). Against each, with the raw aiohttp client
of ``client.py`` (one session, 2025-11-25):

1. **small call**: ``--calls`` ``tools/call echo``, one at a time → p50 / p99 ms. The hold
   ends when the answer comes, so this must not move.
2. **headers of a long call**: ``big`` with ``delay`` 3 s (``--reps`` times, median) → seconds until
   the response headers (and the priming event) arrive. Before them the client has no
   event id: a cut in that window cannot be resumed. This is the window resumability is
   lost for.
3. **large result**: ``big`` of 5 MB and 20 MB (``--reps`` times, after one untimed 20 MB
   call) → median seconds from the POST to the whole answer read, and its content type.
4. **Python SDK**: the official ``mcp`` 2.x ``Client(url, mode="legacy")`` with its
   defaults, the same two calls: seconds, or the error it raised.

Only ever point it at 127.0.0.1. Every proxy it starts is stopped (its process group).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from client import McpSession, http_client, percentile
from contenders import free_port, stop, wait_for_port

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "legacy_server.py"
SIZES = (5_000_000, 20_000_000)
WINDOWS = (0, None)  # None: the default


def start_proxy(workdir: Path, window: int | None) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    config: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": port},
        "upstream": {"command": [sys.executable, str(FIXTURE)]},
        "log": {"level": "warning"},
    }
    if window is not None:
        config["sse"] = {"json_answer_window_ms": window}
    path = workdir / f"proxy-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy", "--config", str(path)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=(workdir / f"proxy-{port}.log").open("wb"),
        start_new_session=True,
    )
    wait_for_port(port, proc)
    return proc, f"http://127.0.0.1:{port}/mcp"


async def timed_post(session: McpSession, args: dict[str, Any]) -> tuple[float, float, str, int]:
    """One ``big`` call: seconds to the headers, to the whole body; content type; bytes."""
    body = session.call_body("big", args, None)
    started = time.perf_counter()
    async with session.http.post(session.url, json=body, headers=session.headers()) as resp:
        headers_at = time.perf_counter() - started
        data = await resp.read()
        return headers_at, time.perf_counter() - started, resp.content_type, len(data)


async def raw_phases(url: str, calls: int, reps: int) -> dict[str, Any]:
    async with http_client(600) as http:
        session = McpSession(http, url)
        await session.initialize()
        await session.call("echo", {"text": "warm"})
        small = []
        for _ in range(calls):
            started = time.perf_counter()
            await session.call("echo", {"text": "hello"})
            small.append((time.perf_counter() - started) * 1000)
        long_headers = [
            (await timed_post(session, {"size": 10, "delay": 3}))[0] for _ in range(reps)
        ]
        large: dict[str, Any] = {}
        await timed_post(session, {"size": max(SIZES)})  # warm: the first grows the heaps
        for size in SIZES:
            runs = [await timed_post(session, {"size": size}) for _ in range(reps)]
            large[str(size)] = {
                "seconds": statistics.median(r[1] for r in runs),
                "content_type": runs[0][2],
                "bytes": runs[0][3],
            }
        await session.close()
    return {
        "small_p50_ms": percentile(small, 0.5),
        "small_p99_ms": percentile(small, 0.99),
        "long_call_headers_s": statistics.median(long_headers),
        "large": large,
    }


async def sdk_phase(url: str, reps: int) -> dict[str, Any]:
    from mcp import Client  # the official SDK, with its defaults

    out: dict[str, Any] = {}
    async with Client(url, mode="legacy") as client:
        for size in SIZES:
            times = []
            try:
                for _ in range(reps):
                    started = time.perf_counter()
                    result = await client.call_tool("big", {"size": size})
                    if result.is_error:
                        raise RuntimeError(str(result.content)[:120])
                    times.append(time.perf_counter() - started)
                out[str(size)] = {"seconds": statistics.median(times)}
            except Exception as exc:  # what the SDK raises is the finding
                out[str(size)] = {"error": f"{type(exc).__name__}: {exc}"[:160]}
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    opts = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for window in WINDOWS:
            name = f"window {window} ms" if window is not None else "default (2000 ms)"
            proc, url = start_proxy(Path(tmp), window)
            try:
                results[name] = await raw_phases(url, opts.calls, opts.reps)
                results[name]["sdk"] = await sdk_phase(url, opts.reps)
            finally:
                stop(proc)
    if opts.json:
        print(json.dumps(results, indent=2))
        return
    print("| | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))

    def row(label: str, cell: Any) -> None:
        print(f"| {label} | " + " | ".join(cell(r) for r in results.values()) + " |")

    row("small call p50 / p99 ms", lambda r: f"{r['small_p50_ms']:.2f} / {r['small_p99_ms']:.2f}")
    row("long call: headers after (s)", lambda r: f"{r['long_call_headers_s']:.2f}")
    for size in SIZES:
        key = str(size)
        row(
            f"{size // 1_000_000} MB raw: s, type",
            lambda r, k=key: f"{r['large'][k]['seconds']:.2f}, {r['large'][k]['content_type']}",
        )
        row(
            f"{size // 1_000_000} MB Python SDK",
            lambda r, k=key: (
                f"{r['sdk'][k]['seconds']:.2f} s"
                if "seconds" in r["sdk"][k]
                else r["sdk"][k]["error"]
            ),
        )


if __name__ == "__main__":
    asyncio.run(main())
