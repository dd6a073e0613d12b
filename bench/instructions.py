"""The proxy's user-space instructions per legacy call and per notification, counted by
callgrind: a figure a loaded machine does not move (issue 23, second CPU pass).

``PYTHONPATH=$PWD .venv/bin/python bench/instructions.py SRC CALLS NOTIFICATIONS [--store
KIND]``: SRC is a directory holding a ``proxy/`` (the tree, or ``git archive COMMIT proxy |
tar -x -C DIR``). The proxy runs under ``valgrind --tool=callgrind --instr-atstart=no`` in
front of the raw emitter; one session is initialized and warmed up, then counting is
switched on for CALLS sequential ``echo`` calls, and again for one ``flood`` of
NOTIFICATIONS (0: skip). ``--store``: ``memory`` (the default), ``sqlite`` (a fresh file
in a temporary directory, ``synchronous: normal``), ``redis`` (a ``redis-server`` the
script starts, over its Unix socket) or ``redis-tcp`` (the same over 127.0.0.1), as
``bench/stores.py`` prepares them for the ``proxy+sqlite`` / ``proxy+redis`` /
``proxy+redis-tcp`` contenders. Every process started is stopped.
"""

import argparse
import asyncio
import glob
import os
import socket
import subprocess
import tempfile
from pathlib import Path

import stores
from callgrind import control, end, ir, proxy_code
from client import McpSession, http_client, until_healthy

ROOT = Path(__file__).resolve().parent.parent
_parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
_parser.add_argument("src", help="a directory holding a proxy/")
_parser.add_argument("calls", type=int)
_parser.add_argument("notifications", type=int)
_parser.add_argument("--store", choices=stores.KINDS, default="memory")
ARGS = _parser.parse_args()
SRC, CALLS, NOTIFS = ARGS.src, ARGS.calls, ARGS.notifications
PY = str(ROOT / ".venv" / "bin" / "python")
FLOOD = str(ROOT / "tests" / "fixtures" / "flood_server.py")


def port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


async def main(setup: stores.StoreSetup, config: str | None):
    p = port()
    out = f"/tmp/cpu2_cg.{os.getpid()}"
    code = proxy_code(SRC)
    argv = [
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={out}",
        PY,
        "-c",
        code,
        "--port",
        str(p),
        "--log-level",
        "warning",
        *(["--config", config] if config else []),
        "--",
        PY,
        FLOOD,
    ]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, **setup.env},
    )
    url = f"http://127.0.0.1:{p}/mcp"
    try:
        async with http_client(600) as http:
            await until_healthy(http, p)
            s = McpSession(http, url)
            await s.initialize()
            for i in range(30):
                await s.call("echo", {"text": f"w{i}"})
            await s.call("flood", {"n": 100, "size": 200}, token=1)
            res = {}
            for label, n in (("call", CALLS), ("notif", NOTIFS)):
                if not n:
                    continue
                control("-i", "on", str(proc.pid))
                control("-z", str(proc.pid))
                if label == "call":
                    for i in range(n):
                        await s.call("echo", {"text": f"c{i}"})
                else:
                    await s.call("flood", {"n": n, "size": 200}, token=2)
                for f in glob.glob(out + "*"):
                    os.unlink(f)
                control("-d", str(proc.pid))
                control("-i", "off", str(proc.pid))
                files = sorted(glob.glob(out + "*"))
                if os.environ.get("KEEP"):
                    for f in files:
                        os.rename(f, f"/tmp/cpu2_keep_{label}.cg")
                    files = [f"/tmp/cpu2_keep_{label}.cg"]
                total = sum(ir(f) or 0 for f in files)
                res[label] = total / n
            print(SRC, setup.kind, {k: round(v) for k, v in res.items()})
    finally:
        end([proc], out)


def run() -> None:
    with stores.backends(), stores.prepared(ARGS.store) as setup:
        if not setup.sections:
            asyncio.run(main(setup, None))
            return
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="bench-ir-") as f:
            f.write(setup.sections)
            f.flush()
            asyncio.run(main(setup, f.name))


run()
