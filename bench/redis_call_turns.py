"""A legacy echo call's loop iterations in the proxy, by what ran in each (issue 23, helper
redis5): where a call's time goes with a store against the memory store.

``PYTHONPATH=$PWD .venv/bin/python bench/redis_call_turns.py SRC [--store URL] [--calls N]
[--trace | --profile OUT]``: SRC holds the ``proxy/`` to run, in front of the raw emitter;
``--store``: a ``redis://`` or ``unix://`` URL of a redis-server of your own (default: the
memory store). One session is initialized and warmed up, then N echo calls go one at a
time; printed: ms per call, and ``INFO commandstats`` per call (with a store).
``--trace``: every loop iteration of the calls is recorded in the proxy (the callbacks it
ran, and the time to the next iteration's start, its poll included) and summarized by
kind; ``--profile OUT``: the calls under cProfile (``OUT``: pstats). Every process
started is stopped. Wall-clock figures move with the box's load; the iterations do not.
"""

import argparse
import asyncio
import collections
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
from callgrind import proxy_code
from client import McpSession, http_client, until_healthy

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
FLOOD = str(ROOT / "tests" / "fixtures" / "flood_server.py")

# Run in the proxy: SIGUSR2 starts the recording, SIGUSR1 writes it and exits.
TRACING = """
import signal, sys, time, asyncio.base_events as be, asyncio.events as ev
sys.path.insert(0, {src!r}); sys.argv[0] = 'mcp-resume-proxy'
from proxy.cli import main
rec, on = [], [False]
handle_run, run_once = ev.Handle._run, be.BaseEventLoop._run_once
def run(self):
    if on[0]:
        rec.append(getattr(self._callback, '__qualname__', type(self._callback).__name__))
    return handle_run(self)
def once(self):
    if on[0]:
        rec.append('-- %r' % time.perf_counter())
    return run_once(self)
ev.Handle._run, be.BaseEventLoop._run_once = run, once
def stop(*_):
    open({out!r}, 'w').write('\\n'.join(rec)); import os; os._exit(0)
def start(*_):
    on[0] = True
signal.signal(signal.SIGUSR1, stop)
signal.signal(signal.SIGUSR2, start)
sys.exit(main())
"""
PROFILING = """
import cProfile, signal, sys
sys.path.insert(0, {src!r}); sys.argv[0] = 'mcp-resume-proxy'
from proxy.cli import main
profile = cProfile.Profile()
def stop(*_):
    profile.disable(); profile.dump_stats({out!r}); import os; os._exit(0)
signal.signal(signal.SIGUSR1, stop)
signal.signal(signal.SIGUSR2, lambda *_: profile.enable())
sys.exit(main())
"""


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def summary(path: str) -> None:
    """Each kind of iteration (the callbacks it ran): count, and mean µs to the next one."""
    took: dict[str, list[float]] = collections.defaultdict(list)
    start, ran = None, []
    for line in Path(path).read_text().splitlines():
        if line.startswith("-- "):
            now = float(line[3:])
            if start is not None:
                took[" + ".join(ran) or "(nothing)"].append((now - start) * 1e6)
            start, ran = now, []
        else:
            ran.append(line)
    for kind, times in sorted(took.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(times):6d} x {sum(times) / len(times):7.0f} us  {kind}")


async def main(args: argparse.Namespace) -> None:
    port = free_port()
    out = tempfile.mktemp(prefix="call-turns-")
    if args.trace:
        argv = [PY, "-c", TRACING.format(src=args.src, out=out)]
    elif args.profile:
        argv = [PY, "-c", PROFILING.format(src=args.src, out=args.profile)]
    else:
        argv = [PY, "-c", proxy_code(args.src)]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as config:
        if args.store:
            ns = f"turns{secrets.token_hex(3)}"
            config.write(f"store:\n  kind: redis\n  url: {args.store}\n  namespace: {ns}\n")
        config.flush()
        argv += ["--port", str(port), "--log-level", "warning", "--config", config.name]
        env = {**os.environ, "MCP_RESUME_PROXY_TOKEN_SECRET": "x" * 32}
        proc = subprocess.Popen([*argv, "--", PY, FLOOD], env=env, start_new_session=True)
        admin = redis.Redis.from_url(args.store) if args.store else None
        try:
            async with http_client(600) as http:
                await until_healthy(http, port, tries=100)
                s = McpSession(http, f"http://127.0.0.1:{port}/mcp")
                await s.initialize()
                for i in range(30):
                    await s.call("echo", {"text": f"w{i}"})
                if admin is not None:
                    admin.config_resetstat()
                recording = args.trace or args.profile
                if recording:
                    os.kill(proc.pid, signal.SIGUSR2)
                t0 = time.perf_counter()
                for i in range(args.calls):
                    await s.call("echo", {"text": f"c{i}"})
                per_call = (time.perf_counter() - t0) / args.calls * 1e3
                if recording:
                    os.kill(proc.pid, signal.SIGUSR1)
                    proc.wait(30)
            print(f"{args.src} {args.store or 'memory'}: {per_call:.3f} ms/call, one at a time")
            if admin is not None:
                for name, v in sorted(admin.info("commandstats").items()):
                    per = args.calls
                    print(f"  {name} {v['calls'] / per:.2f}/call {v['usec'] / per:.1f} us/call")
            if args.trace:
                summary(out)
        finally:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(10)
            if os.path.exists(out):
                os.unlink(out)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", help="a directory holding a proxy/")
    parser.add_argument("--store", help="a redis URL (default: the memory store)")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--profile", help="a file for cProfile's stats")
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
