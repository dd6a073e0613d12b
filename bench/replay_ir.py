"""Replica B's instructions for an A → B replay (callgrind): a figure the load does not move.

``PYTHONPATH=$PWD/bench .venv/bin/python bench/replay_ir.py SRC [RESUMES]``: SRC a
directory holding a ``proxy/``. Two proxies on one fresh ``redis-server`` (over its Unix
socket, as ``bench/stores.py`` prepares the ``proxy+redis`` contender) in front of the raw
emitter: A plain, B under ``valgrind --tool=callgrind --instr-atstart=no``. One cold
resume (not counted), then RESUMES times: a 10,000-notification ``flood`` on A, left after
its priming event and waited for until the store says it completed (``resume.py``'s
steps), then counting is switched on in B for the ``GET`` + ``Last-Event-ID`` to B, read
to its end. Prints B's instructions per replay, in millions (``KEEP=1``: the dumps kept
as ``/tmp/replay_ir.N.cg`` for ``callgrind_annotate``). Every process started is stopped.
"""

from __future__ import annotations

import asyncio
import glob
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import resume as R
import stores
from callgrind import control, end, ir, proxy_code
from client import McpSession, http_client, until_healthy
from contenders import free_port

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
FLOOD = str(ROOT / "tests" / "fixtures" / "flood_server.py")
SRC = sys.argv[1]
RESUMES = int(sys.argv[2]) if len(sys.argv) > 2 else 3


async def main(setup: stores.StoreSetup, config: str) -> None:
    out = f"/tmp/replay_ir_cg.{os.getpid()}"
    code = proxy_code(SRC)
    procs: list[subprocess.Popen[bytes]] = []
    ports: list[int] = []
    try:
        for under in ([], ["valgrind", "--tool=callgrind", "--instr-atstart=no"]):
            port = free_port()
            argv = [*under, *([f"--callgrind-out-file={out}"] if under else []), PY, "-c", code]
            argv += ["--port", str(port), "--log-level", "warning", "--config", config]
            procs.append(
                subprocess.Popen(
                    [*argv, "--", PY, FLOOD],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                    env={**os.environ, **setup.env},
                )
            )
            ports.append(port)
        a, b = (f"http://127.0.0.1:{p}/mcp" for p in ports)
        b_pid = str(procs[1].pid)
        async with http_client(600) as http:
            for port in ports:
                await until_healthy(http, port)
            opts = R.Options(a, b, setup.probe, "flood", 10_000, 200, RESUMES)
            session = McpSession(http, a)
            await session.initialize()
            await session.call("echo", {"text": "warm-up"})
            await R.resume_once(session, opts)  # cold: not counted
            totals: list[int] = []
            for n in range(RESUMES):
                _, last_id = await R.start_and_leave(session, opts)
                epoch, number = last_id.split(".")[:2]
                await R.wait_finished(http, opts, f"{epoch}.{number}")
                control("-i", "on", b_pid)
                control("-z", b_pid)
                headers = session.headers("text/event-stream") | {"Last-Event-ID": last_id}
                async with http.get(b, headers=headers) as resp:
                    async for _ in resp.content.iter_any():
                        pass
                for f in glob.glob(out + "*"):
                    os.unlink(f)
                control("-d", b_pid)
                control("-i", "off", b_pid)
                dumps = sorted(glob.glob(out + "*"))
                totals.append(sum(ir(f) for f in dumps))
                if os.environ.get("KEEP"):
                    for i, f in enumerate(dumps):
                        os.rename(f, f"/tmp/replay_ir.{n + 1}.{i}.cg")
        shown = [round(t / 1e6, 1) for t in totals]
        print(SRC, "B instructions per replay (M):", shown, flush=True)
    finally:
        end(procs, out)


def run() -> None:
    with (
        stores.backends(),
        stores.prepared("redis") as setup,
        tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="bench-ir-") as f,
    ):
        f.write(setup.sections)
        f.flush()
        asyncio.run(main(setup, f.name))


if __name__ == "__main__":
    run()
