"""Profile this proxy with a store under one benchmark phase (py-spy), and summarize.

``.venv/bin/python bench/profile_store.py --store sqlite --phase latency [--out /tmp/prof]``

- ``latency``: ``bench/load.py`` with ``--calls`` echo calls one at a time (the other
  load phases cut to nothing);
- ``throughput``: 8 callers calling ``echo`` for ``--seconds``;
- ``burst``: ``--bursts`` bursts of 10,000 notifications (``flood``);
- ``--era modern``: those two with the stateless 2026-07-28 client (``load.py --era
  modern``), through the pool of upstream sessions (``--store memory``: no store);
- ``BENCH_PROXY_SRC=DIR`` (what ``run.py --proxy-at`` sets): run the copy of ``proxy/`` in
  ``DIR`` instead of the working tree (not with ``--trace``);
- ``stall``: ``bench/stall.py`` (``--stall-burst``, ``--stall-resume``), every call's
  start and time to ``OUT.stall.json`` (with ``--trace``: beside the commit timeline);
- ``resume``: ``bench/resume.py`` with ``--resumes`` resumes; with ``--store redis`` two
  replicas on one namespace, and the profile is of B (the replica that serves the
  resume from the shared log); else one proxy.

The proxy runs in front of the raw emitter, on a fresh store (``stores.prepared``);
``py-spy record --nonblocking --threads -f raw`` samples it (``pip install py-spy``
into ``.venv``: not a dependency) while the phase runs (``--gil``: only the thread that
holds the GIL, i.e. where the Python CPU goes; ``--no-spy``: no sampling). The raw
stacks go to ``OUT.txt`` (``py-spy``'s collapsed format: ``flamegraph.pl`` or speedscope
read it) and the summary (the top functions by own samples and by inclusive samples, per
thread) to stdout. ``--trace`` runs the proxy under ``bench/storetrace.py``: each store
commit and each wait of a writer for the store timed (``OUT.trace.json``). Every process
started is stopped, as in the benchmark.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import contenders as C
import stores
from contenders import BENCH, PYTHON, RAW, ROOT, Contender

PY_SPY = Path(os.environ.get("BENCH_PY_SPY", ROOT / ".venv" / "bin" / "py-spy"))  # or elsewhere
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def phase_command(phase: str, urls: list[str], probe: str, args: argparse.Namespace) -> list[str]:
    if phase == "stall":
        dump = ["--dump", str(args.out.with_suffix(".stall.json"))]
        flags = ["--burst", str(args.stall_burst), "--resume-events", str(args.stall_resume)]
        return [PYTHON, str(BENCH / "stall.py"), "--url", urls[0], "--probe", probe, *flags, *dump]
    if phase == "resume":
        return [
            PYTHON,
            str(BENCH / "resume.py"),
            *("--url", urls[0], "--url-b", urls[-1], "--resumes", str(args.resumes)),
            *(("--probe", probe) if probe else ()),
        ]
    common = ["--sessions", "1", "--seconds", "0.1", "--long-calls", "0", "--burst-tool", "flood"]
    if phase == "throughput":  # 8 callers for --seconds
        common = ["--sessions", "8", "--seconds", str(args.seconds), *common[4:]]
        more = ["--calls", "1", "--notifications", "10", "--burst-reps", "1"]
    elif phase == "latency":
        more = ["--calls", str(args.calls), "--notifications", "10", "--burst-reps", "1"]
    else:
        more = ["--calls", "1", "--notifications", "10000", "--burst-reps", str(args.bursts)]
    era = ["--era", args.era]
    return [PYTHON, str(BENCH / "load.py"), "--url", urls[0], *common, *more, *era]


def short(frame: str) -> str:
    """``func (path/to/file.py:12)`` as ``func (file.py)``."""
    m = _FRAME.match(frame)
    if m is None:
        return frame
    return f"{m['func']} ({Path(m['file']).name})"


def summarize(raw: Path, top: int) -> str:
    """The top functions of a py-spy raw profile: own and inclusive share of the samples,
    per thread (the first frame of each stack with ``--threads``)."""
    own: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    incl: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    totals: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        thread = frames[0] if frames[0].startswith("thread") else "all"
        frames = [short(f) for f in frames if not f.startswith(("thread", "process"))]
        n = int(count)
        totals[thread] += n
        if frames:
            own[thread][frames[-1]] += n
        for f in set(frames):
            incl[thread][f] += n
    out: list[str] = []
    grand = sum(totals.values())
    for thread, total in totals.most_common():
        out.append(f"\n== {thread}: {total} samples ({total / grand:.0%} of all)")
        out.append("-- own")
        out += [f"{n / total:6.1%}  {f}" for f, n in own[thread].most_common(top)]
        out.append("-- inclusive")
        out += [f"{n / total:6.1%}  {f}" for f, n in incl[thread].most_common(top)]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--store", choices=stores.KINDS, required=True)
    parser.add_argument(
        "--phase", choices=("latency", "throughput", "burst", "resume", "stall"), required=True
    )
    parser.add_argument("--stall-burst", type=int, default=10_000, help="stall: the burst")
    parser.add_argument("--stall-resume", type=int, default=50_000, help="stall: resumed events")
    parser.add_argument("--out", type=Path, default=Path("/tmp/proxy-profile"))
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--idle", action="store_true", help="also sample idle threads")
    parser.add_argument("--gil", action="store_true", help="only the thread holding the GIL")
    parser.add_argument("--no-spy", action="store_true", help="no py-spy (with --trace)")
    parser.add_argument("--trace", action="store_true", help="time commits (storetrace.py)")
    parser.add_argument("--calls", type=int, default=3000, help="latency: echo calls")
    parser.add_argument("--seconds", type=float, default=10.0, help="throughput: how long")
    parser.add_argument("--bursts", type=int, default=10, help="burst: how many")
    parser.add_argument("--resumes", type=int, default=10, help="resume: how many")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument(
        "--era",
        choices=("legacy", "modern"),
        default="legacy",
        help="latency, burst: the load client (modern: stateless 2026-07-28 calls, issue 11)",
    )
    args = parser.parse_args()
    if args.era == "modern" and args.phase == "resume":
        sys.exit("--era modern: latency or burst (a modern call has nothing to resume)")
    if not PY_SPY.exists() and not args.no_spy:
        sys.exit(f"{PY_SPY} is missing: .venv/bin/pip install py-spy")
    replicas = 2 if args.phase == "resume" and args.store in stores.REDIS_KINDS else 1
    raw = args.out.with_suffix(".txt")
    trace = args.out.with_suffix(".trace.json")
    proxy = Contender("proxy", "proxy", RAW, "flood")
    with stores.backends(), stores.prepared(args.store) as store, contextlib.ExitStack() as stack:
        config = C.config_file(store.sections) if store.sections else None
        if config is not None:
            stack.callback(config.unlink)
        extra = ["--config", str(config)] if config is not None else []
        env = dict(store.env)
        if args.trace:
            env["BENCH_STORETRACE_OUT"] = str(trace)
        urls: list[str] = []
        pid = 0
        for i in range(replicas):
            port = C.free_port()
            argv = proxy.argv(port, extra)
            if args.trace and i == replicas - 1:  # the profiled one
                argv = [PYTHON, str(BENCH / "storetrace.py"), *argv[1:]]
            proc = stack.enter_context(C.running(argv, port, env))
            urls.append(f"http://{C.HOST}:{port}/mcp")
            pid = proc.pid  # the last one: B when there are two
        spy: subprocess.Popen[bytes] | None = None
        if not args.no_spy:
            spy_argv = [str(PY_SPY), "record", "--nonblocking", "--threads", "-f", "raw"]
            spy_argv += ["-r", str(args.rate), "-o", str(raw), "--pid", str(pid)]
            spy_argv += (["--idle"] if args.idle else []) + (["--gil"] if args.gil else [])
            spy = subprocess.Popen(
                spy_argv,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        try:
            done = subprocess.run(
                phase_command(args.phase, urls, store.probe, args), capture_output=True, text=True
            )
        finally:
            if spy is not None:
                os.killpg(spy.pid, signal.SIGINT)  # py-spy writes its file on SIGINT
                try:
                    spy.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    C.stop(spy)
        print(done.stdout.strip())
        if done.returncode != 0:
            sys.exit(f"the phase failed:\n{done.stderr[-2000:]}")
        if args.store in stores.REDIS_KINDS:  # what the server itself spent, per command
            print("redis-server INFO commandstats (usec_per_call is the server's own time):")
            for name, stat in stores.command_stats().items():
                print(f"  {name}: {stat}")
    # The proxies are stopped here: storetrace.py has written its figures.
    if args.trace and trace.exists():
        print(f"store trace ({trace}):\n{trace.read_text()}")
    if spy is not None:
        print(f"profile of pid {pid} ({args.store}, {args.phase}, {args.era}): {raw}")
        print(summarize(raw, args.top))


if __name__ == "__main__":
    main()
