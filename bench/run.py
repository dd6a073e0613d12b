"""Benchmark runner: each contender on a free 127.0.0.1 port, the same phases, markdown tables.

``.venv/bin/python bench/run.py [--quick] [--peers] [--reps R] [--contenders a,b] [--no-memory]
[--no-resume]``

For each repetition, every contender in turn: start it, wait for its port, run
``bench/load.py`` against it (a separate process, so its CPU share is its own), stop it
(SIGTERM to its process group, then wait). Repetitions are interleaved (all contenders
once, then all again) so that ratios can be taken pair by pair within a repetition.
Then the memory and many-sessions phases (``bench/memory.py``), each on a fresh start,
and, when a store contender runs, the resume phase (``bench/replicas.py``). The Redis
server of the ``proxy+redis`` contenders is started once and stopped at the end.
The upstream-alone figures come from ``bench/emission.py``, the commit and machine lines
under the tables (and the ``--proxy-at`` copy) from ``bench/provenance.py``.
See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import contenders as C
import python_peers
import replicas
import report
import stores
from contenders import BENCH, PYTHON, RAW, SDK, Contender
from emission import EMIT_RAW, EMIT_SDK, stdio_emission
from memory import raise_nofile
from provenance import archive_proxy, code_version, machine_line
from targets import modern_targets_table, store_targets_table, targets_table
from targets23 import targets23_table


def _phases(
    contender: Contender,
    script: str,
    args: list[str],
    timeout: float,
    sections: str = "",
    *,
    alone: bool = False,
) -> list[dict[str, Any]]:
    """Start ``contender``, run ``bench/<script> --url --pid --json ARGS`` at it, stop it.
    memory.py and stall.py also get the store's probe (``--probe``)."""
    with C.started(contender, sections, alone=alone) as started:
        wants_probe = script in ("memory.py", "stall.py")
        probe = ["--probe", started.probe] if started.probe and wants_probe else []
        cmd = [
            PYTHON,
            str(BENCH / script),
            "--url",
            f"http://{C.HOST}:{started.port}/mcp",
            "--pid",
            str(started.pid),
            "--json",
            *args,
            *probe,
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"{contender.name}: {script} failed:\n{out.stderr[-3000:]}")
        phases: list[dict[str, Any]] = json.loads(out.stdout)
        return phases


def run_load(contender: Contender, load_args: list[str]) -> list[dict[str, Any]]:
    replay = ["--replay"] if contender.replay else []
    args = ["--burst-tool", contender.burst_tool, "--era", contender.client, *load_args, *replay]
    return _phases(contender, "load.py", args, timeout=900)


def run_memory(
    contender: Contender, phase_args: list[str], sections: str = "", *, alone: bool = False
) -> list[dict[str, Any]]:
    health = ["--health"] if contender.health else []
    args = ["--flood-tool", contender.burst_tool, *health, *phase_args]
    return _phases(contender, "memory.py", args, 1800, sections, alone=alone)


NO_PHASES = ["--buffer-mb", "0", "--idle-sessions", "0", "--concurrent", "0"]


def only(phase: str, value: str, *more: str) -> list[str]:
    """memory.py arguments that run ``phase`` alone."""
    args = list(NO_PHASES)
    args[args.index(f"--{phase}") + 1] = value
    return [*args, *more]


def memory_suite(
    quick: bool, raw: dict[str, Contender], http_sessions: int, http_idle: int, standalone: str
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each memory phase on a fresh start of each contender (in front of the raw emitter)
    that can do it. A redis contender's buffered phase starts on a flushed Redis (its
    ``used_memory`` growth is measured)."""
    idle, conc, mb = ("50", "20", "10") if quick else ("200", "100", "50")
    results: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    big = "sessions:\n  max_sessions: 1100\n"
    plans: list[tuple[Contender, str, list[str], str]] = []
    for name, c in raw.items():
        if c.client == "modern":  # stateless: no session to hold memory, only callers
            more = ["--era", "modern"]
            plans.append((c, "concurrent", only("concurrent", conc, *more), ""))
            continue
        sections = big if c.kind == "proxy" else ""
        if c.event_store:  # the ones that keep events for a resume
            cap = python_peers.BUFFER_MB.get(c.kind)  # a peer too slow for the full size
            if cap is not None and cap < float(mb):
                notes.append(f"{name} buffered: {cap:g} MB, not {mb}: {python_peers.SLOW_STORE}")
            size = mb if cap is None else f"{min(cap, float(mb)):g}"
            plans.append((c, "buffered", only("buffer-mb", size), sections))
        else:
            notes.append(f"{name} buffered: n/a, no event store (nothing kept to resume)")
        plans.append((c, "idle", only("idle-sessions", idle), sections))
        plans.append((c, "concurrent", only("concurrent", conc), sections))
    for c, phase, args, sections in plans:
        print(f"memory: {c.name} {phase}", file=sys.stderr, flush=True)
        try:
            for p in run_memory(c, args, sections, alone=phase == "buffered"):
                results.setdefault(c.name, {})[p["name"]] = p
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            failed = {"name": phase, "error": f"failed: {str(exc).strip()[-300:]}"}
            results.setdefault(c.name, {})[phase] = failed
    if http_sessions:
        try:
            results.update(http_upstream_sessions(http_sessions, http_idle, standalone, quick))
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            notes.append(f"sessions over an HTTP upstream: failed, {str(exc)[-300:]}")
    elif C.http_upstream_available():
        notes.append("sessions against an HTTP upstream: not run (--http-sessions 0)")
    else:
        notes.append(
            "1,000 sessions against an HTTP upstream: not run, proxy/upstream/http.py "
            "does not exist yet (the runner uses it as soon as it does)"
        )
    return results, notes


def http_upstream_sessions(
    n: int, idle: int, standalone: str, quick: bool
) -> dict[str, dict[str, Any]]:
    """The proxy in front of the SDK fixture served over HTTP (one process for all sessions):
    ``idle`` sessions left idle (RSS growth per session; no children here), then ``n``
    concurrent sessions making 5 calls each. ``standalone``: ``upstream.standalone_stream``
    (``open``: one GET stream upstream per session, idle or not: the proxy and the server
    each hold a connection per session, so both get this process's open-file limit raised
    to its hard limit)."""
    raise_nofile()
    sessions = str(min(n, 100) if quick else n)
    idle_sessions = str(min(idle, 100) if quick else idle)
    upstream_port = C.free_port()
    upstream = [PYTHON, str(C.SERVE_HTTP), "--fixture", str(C.LEGACY), "--port"]
    results: dict[str, dict[str, Any]] = {}
    with C.running([*upstream, str(upstream_port)], upstream_port):
        url = f"http://{C.HOST}:{upstream_port}/mcp"
        sections = (
            f"upstream:\n  url: {url}\n  standalone_stream: {standalone}\n"
            f"sessions:\n  max_sessions: {max(n, idle) + 100}\n"
        )
        proxy = Contender("proxy+http-upstream", "proxy-http", [], "burst", health=True)
        for phase, args in [
            ("idle", only("idle-sessions", idle_sessions)),
            ("concurrent", only("concurrent", sessions, "--concurrent-calls", "5")),
        ]:
            print(f"memory: {proxy.name} {phase}", file=sys.stderr, flush=True)
            for p in run_memory(proxy, args, sections):
                results.setdefault(proxy.name, {})[p["name"]] = p
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: small N, T, R")
    parser.add_argument("--peers", action="store_true", help="install and run the peers too")
    parser.add_argument("--contenders", help="comma-separated names (default: all)")
    parser.add_argument("--reps", type=int, help="repetitions (default 3, --quick 1)")
    parser.add_argument("--calls", type=int, help="latency calls (default 500, --quick 100)")
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed echo calls before the latency phase"
    )
    parser.add_argument("--seconds", type=float, help="throughput seconds (5, --quick 1)")
    parser.add_argument("--long-calls", type=int, help="long-session calls (3000, --quick 1000)")
    parser.add_argument("--notifications", type=int, help="burst size (10000, --quick 2000)")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory phases")
    parser.add_argument("--no-resume", action="store_true", help="skip the resume phase")
    parser.add_argument("--no-stall", action="store_true", help="skip the no-stall phase")
    parser.add_argument(
        "--resumes", type=int, help="timed resumes per start, resume phase (5, --quick 2)"
    )
    parser.add_argument(
        "--http-sessions", type=int, default=1000, help="concurrent sessions over an HTTP upstream"
    )
    parser.add_argument(
        "--http-idle-sessions", type=int, default=10000, help="idle sessions over an HTTP upstream"
    )
    parser.add_argument(
        "--http-standalone",
        choices=["open", "on_client_get"],
        default="open",  # the proxy's default
        help="upstream.standalone_stream of proxy+http-upstream",
    )
    parser.add_argument("--json-out", type=Path, help="also write the raw phase results here")
    parser.add_argument(
        "--proxy-at",
        metavar="COMMIT",
        help="run this proxy as of COMMIT (git archive of proxy/ into a temporary directory)",
    )
    parser.add_argument(
        "--baseline",
        metavar="COMMIT",
        help="also run proxy/ as of COMMIT as a twin of each of this proxy's contenders "
        "(proxy@COMMIT+raw beside proxy+raw): before and after in one run",
    )
    parser.add_argument("--from-json", type=Path, help="only render a run saved by --json-out")
    args = parser.parse_args()
    if args.from_json:
        print(render(json.loads(args.from_json.read_text())))
        return
    with contextlib.ExitStack() as stack:
        if args.proxy_at:
            frozen = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-proxy-"))
            archive_proxy(args.proxy_at, Path(frozen))
            os.environ[C.PROXY_SRC_ENV] = frozen  # the contenders' children inherit it
        if args.baseline:
            base = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-baseline-"))
            commit = archive_proxy(args.baseline, Path(base), frozen=False)
            C.BASELINE.update(commit=commit[:7], src=base)
        # The Redis server, if a contender needs it, stops at the end.
        stack.enter_context(stores.backends())
        data = run_all(args)
    if args.json_out:
        args.json_out.write_text(json.dumps(data, indent=1))
    print(render(data))


def run_all(args: argparse.Namespace) -> dict[str, Any]:
    q = args.quick
    notes: list[str] = []
    # Every contender, the peers too: a peer named in --contenders runs without --peers.
    load_set = {
        **C.contenders(SDK, "burst", peers=True),
        **C.contenders(RAW, "flood", peers=True),
    }
    if args.contenders:
        names = [n.strip() for n in args.contenders.split(",") if n.strip()]
        unknown = [n for n in names if n not in load_set]
        if unknown:
            sys.exit(f"unknown contenders {unknown}; known: {', '.join(load_set)}")
        if C.BASELINE:  # a proxy contender named brings its --baseline twin beside it
            tag = f"proxy@{C.BASELINE['commit']}"
            ours = [n for n in names if load_set[n].kind == "proxy" and not n.startswith(tag)]
            names = list(dict.fromkeys([*names, *(n.replace("proxy", tag, 1) for n in ours)]))
        load_set = {n: load_set[n] for n in names}
    elif not args.peers:
        load_set = {n: c for n, c in load_set.items() if not c.peer}
    if any(c.peer for c in load_set.values()):
        for problem in C.install_peers():
            notes.append(f"peer not installed: {problem}")
    started_at = code_version()
    print(f"measuring {started_at}", file=sys.stderr, flush=True)
    reps = args.reps or (1 if q else 3)
    n = args.notifications or (2000 if q else 10_000)
    load_args = [
        *("--calls", str(args.calls or (100 if q else 500))),
        *("--sessions", str(args.sessions)),
        *("--warmup", str(args.warmup)),
        *("--seconds", str(args.seconds or (1.0 if q else 5.0))),
        *("--long-calls", str(args.long_calls or (1000 if q else 3000))),
        *("--notifications", str(n)),
    ]

    raw: dict[str, list[list[dict[str, Any]]]] = {name: [] for name in load_set}
    emission: list[dict[str, float]] = []  # per repetition: each upstream alone on a pipe
    for rep in range(reps):
        for name, contender in load_set.items():
            print(f"{name}: run {rep + 1}/{reps}", file=sys.stderr, flush=True)
            try:
                raw[name].append(run_load(contender, load_args))
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                if not contender.peer:
                    raise
                notes.append(f"{name} run {rep + 1}: failed, {str(exc).strip()[-300:]}")
                raw[name].append([])
        emission.append(
            {
                label: statistics.median(stdio_emission(server, tool, n) for _ in range(3))
                for label, server, tool in [(EMIT_SDK, SDK, "burst"), (EMIT_RAW, RAW, "flood")]
            }
        )
    http_sessions = args.http_sessions if C.http_upstream_available() else 0
    memory: dict[str, dict[str, Any]] = {}
    mem_notes: list[str] = []
    if not args.no_memory:
        raw_set = C.contenders(RAW, "flood", peers=True)
        chosen = {k: c for k, c in raw_set.items() if k in load_set}
        # Without any raw contender chosen, the memory phases run on all of them (as before
        # the stores) but the store and modern contenders, which only run when asked for.
        if not chosen:
            chosen = {
                k: c
                for k, c in raw_set.items()
                if c.store == "memory" and c.client == "legacy" and (args.peers or not c.peer)
            }
        memory, mem_notes = memory_suite(
            q, chosen, http_sessions, args.http_idle_sessions, args.http_standalone
        )
    resume: dict[str, list[dict[str, Any]]] = {}
    resume_n = n if q else 10_000  # the burst: 10,000 notifications
    if not args.no_resume and any(c.store != "memory" for c in load_set.values()):
        resume = replicas.resume_suite(reps, resume_n, args.resumes or (2 if q else 5))
    stall: dict[str, list[dict[str, Any]]] = {}
    if not args.no_stall:
        stall = stall_suite(reps, [n for n in STALL_CONTENDERS if n in load_set], load_set, q)
    return {
        "load": raw,
        "stall": stall,
        "emission": emission,
        "memory": memory,
        "resume": resume,
        "notes": notes + mem_notes,
        "notifications": n,
        "resume_notifications": resume_n,
        "sessions": args.sessions,
        "http_sessions": http_sessions,
        "http_idle_sessions": args.http_idle_sessions,
        "peers": [name for name, c in load_set.items() if c.peer],
        "machine": machine_line([Path(PYTHON).name, *sys.argv]),
        "started_at": started_at,
    }


STALL_CONTENDERS = ("proxy+raw", "proxy+sqlite", "proxy+redis", "proxy+redis-tcp")


def stall_suite(
    reps: int, names: list[str], load_set: dict[str, Contender], quick: bool
) -> dict[str, list[dict[str, Any]]]:
    """The no-stall phase (bench/stall.py), each contender on a fresh start per repetition
    (interleaved)."""
    args = ["--resume-events", "10000", "--burst", "2000"] if quick else []
    stall: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for rep in range(reps):
        for name in names:
            print(f"stall: {name} run {rep + 1}/{reps}", file=sys.stderr, flush=True)
            try:
                stall[name] += _phases(load_set[name], "stall.py", args, timeout=900)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                stall[name].append({"error": f"failed: {str(exc).strip()[-300:]}"})
    return stall


def render(data: dict[str, Any]) -> str:
    """The markdown of one run (``run.py --from-json FILE`` renders a saved run again)."""
    raw: dict[str, list[list[dict[str, Any]]]] = data["load"]
    emission: list[dict[str, float]] = data["emission"]
    memory: dict[str, dict[str, Any]] = data["memory"]
    peers: list[str] = data["peers"]
    reps = len(emission)
    per_rep = [{name: report.load_row(runs[r]) for name, runs in raw.items()} for r in range(reps)]
    medians = {name: report.median_row([rows[name] for rows in per_rep]) for name in raw}
    for rows, rates in zip(per_rep, emission, strict=True):  # for the paired burst target
        rows.update({label: {"notif_per_s": rate} for label, rate in rates.items()})
    out = [report.load_table(medians, data["sessions"])]
    out.append(
        f"Upstream alone, writing {data['notifications']:,} notifications to a pipe read by a "
        "spinning reader (no HTTP, no proxy; median of 3 per repetition, then of the "
        "repetitions): "
        + ", ".join(
            f"{label} {statistics.median(e[label] for e in emission):,.0f}/s"
            for label in (EMIT_SDK, EMIT_RAW)
        )
    )
    for ours in ("proxy+sdk", "proxy+raw", "proxy+modern", "proxy+modern-sdk"):
        theirs = [p for p in peers if p.endswith(ours.removeprefix("proxy"))]
        if theirs and ours in raw:
            out.append(report.ratio_table(ours, theirs, per_rep))
    if memory:
        out.append(report.memory_table(memory))
    stored = report.store_table(memory)
    if stored:
        out.append(stored)
    resume: dict[str, list[dict[str, Any]]] = data.get("resume", {})
    resume_n = data.get("resume_notifications", data["notifications"])
    if resume:
        out.append(replicas.resume_table(resume, resume_n))
    out.append(targets_table(per_rep, medians, memory, peers, data["http_sessions"]))
    if any(name.startswith("proxy+modern") for name in raw):
        out.append(modern_targets_table(per_rep, medians))
    if any(name.startswith(("proxy+sqlite", "proxy+redis")) for name in raw) or resume:
        out.append(store_targets_table(per_rep, resume, resume_n))
    stall: dict[str, list[dict[str, Any]]] = data.get("stall", {})
    if stall:
        out.append(report.stall_table(stall))
    out.append(targets23_table(per_rep, medians, peers, resume, resume_n, stall))
    notes = list(data["notes"])
    notes += [e for name, runs in raw.items() for e in report.errors_of(name, runs)]
    notes += report.memory_notes(memory)
    notes += replicas.resume_notes(resume)
    if notes:
        out.append("\n".join(f"- {note}" for note in notes))
    started = data.get("started_at", "")
    ended = data["machine"]
    tree = started.partition("(")[2]  # the proxy/ tree, and whether it was dirty
    if started and tree not in ended:  # the proxy's code changed during the run
        ended += f" · **the proxy's code changed during the run: it started at {started}**"
    out.append(ended)
    return "\n\n".join(out)


if __name__ == "__main__":
    main()
