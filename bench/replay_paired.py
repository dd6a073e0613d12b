"""The A → B replay of issue 23, paired: ``replicas.run_scenario("redis", 2, N, 3, src)``'s
scenario for each tree, interleaved (the order flipped each round), plus replica B's CPU
time (``utime + stime`` from ``/proc``) over ``resume.py``'s run, per resume (a cold one
and the timed ones).

``.venv/bin/python bench/replay_paired.py ROUNDS SRC [SRC ...]``: each SRC a directory
holding a ``proxy/`` (``git archive main proxy | tar -x -C DIR``, or this tree). Prints
each run's samples (the ``--notifications``-th event, ms from the GET) and, per tree, the
median and max of every sample and the median of B's CPU per resume. Every process
started is stopped (``contenders.running``, ``stores.prepared``).
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
from typing import Any

import contenders as C
import stores
from contenders import BENCH, PYTHON, RAW, Contender

TICK = os.sysconf("SC_CLK_TCK")
NOTIFICATIONS = 10_000
RESUMES = 3


def cpu_ms(pid: int) -> float:
    """The process's user + system CPU time so far, ms."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK * 1000


def scenario(src: str) -> dict[str, Any]:
    """Two replicas on one fresh Redis, ``resume.py`` from A to B; its JSON result with
    ``b_cpu_per_resume`` added (or ``error``)."""
    proxy = Contender("proxy", "proxy", RAW, "flood", src=src)
    with stores.prepared("redis") as store, contextlib.ExitStack() as stack:
        config = C.config_file(store.sections) if store.sections else None
        if config is not None:
            stack.callback(config.unlink)
        extra = ["--config", str(config)] if config is not None else []
        urls: list[str] = []
        pids: list[int] = []
        for _ in range(2):
            port = C.free_port()
            proc = stack.enter_context(C.running(proxy.argv(port, extra), port, store.env))
            pids.append(proc.pid)
            urls.append(f"http://{C.HOST}:{port}/mcp")
        before = cpu_ms(pids[1])
        cmd = [
            PYTHON,
            str(BENCH / "resume.py"),
            *("--url", urls[0], "--url-b", urls[1]),
            *("--notifications", str(NOTIFICATIONS), "--resumes", str(RESUMES)),
            *(("--probe", store.probe) if store.probe else ()),
            "--json",
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        spent = cpu_ms(pids[1]) - before
        if out.returncode != 0:
            return {"error": out.stderr.strip()[-300:]}
        result: dict[str, Any] = json.loads(out.stdout)
        result["b_cpu_per_resume"] = spent / (RESUMES + 1)
        return result


def main() -> None:
    rounds, trees = int(sys.argv[1]), sys.argv[2:]
    samples: dict[str, list[float]] = {t: [] for t in trees}
    cpus: dict[str, list[float]] = {t: [] for t in trees}
    for r in range(rounds):
        for tree in trees if r % 2 == 0 else trees[::-1]:
            res = scenario(tree)
            if "error" in res:
                print(f"round {r} {tree}: ERROR {res['error']}", flush=True)
                continue
            nth = [s["nth_ms"] for s in res["samples"]]
            samples[tree] += nth
            cpus[tree].append(res["b_cpu_per_resume"])
            shown = " ".join(f"{v:.1f}" for v in nth)
            print(
                f"round {r} {tree}: nth {shown} | B cpu/resume {res['b_cpu_per_resume']:.1f} ms"
                f" | load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    for tree in trees:
        if samples[tree]:
            nth, cpu = samples[tree], cpus[tree]
            print(
                f"{tree}: samples {len(nth)} nth median {statistics.median(nth):.1f}"
                f" max {max(nth):.1f} | B cpu/resume median {statistics.median(cpu):.1f}"
                f" (runs {len(cpu)}, min {min(cpu):.1f} max {max(cpu):.1f})"
            )


if __name__ == "__main__":
    main()
