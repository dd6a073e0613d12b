"""The nemesis of issue 19, long: the harness of tests/nemesis/ (three replicas behind
HAProxy on one Redis; legacy, 2026-07-28, WebSocket and shim clients; a seeded schedule
of faults; the checker and the store's audit) for ``--minutes`` with more faults.

    .venv/bin/python bench/nemesis.py --minutes 10                  # the note's run
    .venv/bin/python bench/nemesis.py --minutes 1 --kinds cut,kill  # which fault does what
    .venv/bin/python bench/nemesis.py --seed 1234 --minutes 10       # replay a run

Prints the seed, the schedule as it runs, then the figures: calls by client kind, faults
by kind, outcomes by client kind, the longest time from a call's start to its end, the
streams audited, and the violations by rule (then each, up to ``--show``). Exits 1 when
there is a violation. Needs ``redis-server`` and ``haproxy`` (scripts/install-redis.sh,
scripts/install-haproxy.sh). Every process it starts is stopped before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.nemesis.harness import Report, Settings, run_nemesis  # noqa: E402
from tests.nemesis.schedule import KINDS, parse_kinds  # noqa: E402


def parse_clients(text: str) -> dict[str, int]:
    """``legacy=2,modern=1`` -> ``{"legacy": 2, "modern": 1}``."""
    clients = {}
    for part in text.split(","):
        kind, _, count = part.partition("=")
        if kind not in ("legacy", "modern", "ws", "shim") or not count.isdigit():
            raise argparse.ArgumentTypeError(f"bad client count {part!r}")
        clients[kind] = int(count)
    return clients


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="clients run calls this long")
    parser.add_argument("--seed", type=int, default=None, help="default: a random one, printed")
    parser.add_argument(
        "--faults-per-minute", type=float, default=6.0, help="faults drawn per minute (6)"
    )
    parser.add_argument("--kinds", default="all", help=f"fault kinds: all or of {','.join(KINDS)}")
    parser.add_argument(
        "--store",
        choices=("redis", "sqlite"),
        default="redis",
        help="redis: three replicas on one Redis (default); sqlite: one replica on a file",
    )
    parser.add_argument(
        "--clients",
        type=parse_clients,
        default=parse_clients("legacy=3,modern=2,ws=1,shim=1"),
        help="clients per kind (legacy=3,modern=2,ws=1,shim=1)",
    )
    parser.add_argument("--bound", type=float, default=30.0, help="each call ends within (s)")
    parser.add_argument("--show", type=int, default=40, help="violations listed one by one")
    parser.add_argument("--json-out", type=Path, default=None, help="the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the logs' directory")
    return parser.parse_args(argv)


def as_json(report: Report, took: float) -> dict[str, object]:
    return {
        "seed": report.seed,
        "seconds": round(took, 1),
        "calls": len(report.calls),
        "faults": dict(report.faults_done),
        "outcomes": dict(Counter(f"{c.kind}/{c.tool} {c.outcome}" for c in report.calls)),
        "max_time_to_end_s": max(
            (c.ended - c.started for c in report.calls if c.ended is not None), default=0.0
        ),
        "violations": [
            {"violation": str(v), "faults_during": report.faults_during(v.label)}
            for v in report.violations
        ],
        "phases_s": [[name, round(took, 1)] for name, took in report.timeline.done],
    }


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    seconds = args.minutes * 60
    settings = Settings(
        seconds=seconds,
        faults=round(args.minutes * args.faults_per_minute),
        kinds=parse_kinds(args.kinds, args.store),
        clients=args.clients,
        bound=args.bound,
        store=args.store,
    )
    print(f"nemesis: seed={seed} minutes={args.minutes:g} faults={settings.faults}", flush=True)
    directory = Path(tempfile.mkdtemp(prefix="nemesis-"))
    started = time.monotonic()

    def log(line: str) -> None:
        print(f"[{time.monotonic() - started:7.1f}s] {line}", flush=True)

    report = asyncio.run(run_nemesis(directory, seed, settings, log))
    took = time.monotonic() - started
    print(f"\n{report.figures()}\nwall: {took:.0f}s")
    if report.violations:
        print(report.details(args.show))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(as_json(report, took), indent=2))
    if args.keep:
        print(f"logs: {directory}")
    else:
        import shutil

        shutil.rmtree(directory, ignore_errors=True)
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
