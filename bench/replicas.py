"""The resume phase (issue 10): a finished burst resumed on another replica, and the same
on one replica for comparison. Runs ``bench/resume.py`` against freshly started proxies.

Scenarios, each on a fresh start (fresh sqlite file, fresh redis namespace):

- ``memory, one replica``, ``sqlite, one replica``, ``redis, one replica``: the GET goes
  to the process that ran the call (it still holds the session);
- ``redis, A → B``: two replicas on one Redis namespace; the call runs on A, the GET goes
  to B, which serves it from the shared log.

In front of the raw emitter (``flood``), every proxy started with ``--log-level warning``.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import subprocess
import sys
from typing import Any

import contenders as C
import stores
from contenders import BENCH, PYTHON, RAW, Contender

# (label, store kind, replicas)
SCENARIOS: list[tuple[str, str, int]] = [
    ("memory, one replica", "memory", 1),
    ("sqlite, one replica", "sqlite", 1),
    ("redis, one replica", "redis", 1),
    ("redis, A → B (two replicas)", "redis", 2),
]
REPLICA_SCENARIO = SCENARIOS[-1][0]
KEYS = ("headers_ms", "first_ms", "nth_ms", "response_ms")


def run_scenario(
    kind: str, replicas: int, notifications: int, resumes: int, src: str = ""
) -> dict[str, Any]:
    """Start ``replicas`` proxies on one fresh ``kind`` store, run resume.py, stop them
    (``src``: a copy of ``proxy/`` to run, the ``--baseline`` one)."""
    proxy = Contender("proxy", "proxy", RAW, "flood", src=src)
    with stores.prepared(kind) as store, contextlib.ExitStack() as stack:
        config = C.config_file(store.sections) if store.sections else None
        if config is not None:
            stack.callback(config.unlink)
        extra = ["--config", str(config)] if config is not None else []
        urls: list[str] = []
        for _ in range(replicas):
            port = C.free_port()
            stack.enter_context(C.running(proxy.argv(port, extra), port, store.env))
            urls.append(f"http://{C.HOST}:{port}/mcp")
        cmd = [
            PYTHON,
            str(BENCH / "resume.py"),
            *("--url", urls[0], "--url-b", urls[-1]),
            *("--notifications", str(notifications), "--resumes", str(resumes)),
            *(("--probe", store.probe) if store.probe else ()),
            "--json",
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            return {"error": f"resume.py failed: {out.stderr.strip()[-300:]}"}
        result: dict[str, Any] = json.loads(out.stdout)
        return result


def resume_suite(reps: int, notifications: int, resumes: int) -> dict[str, list[dict[str, Any]]]:
    """Every scenario once per repetition (interleaved), each on a fresh start; with
    ``--baseline``, each also on the baseline's copy of ``proxy/`` (``label @commit``)."""
    runs = [(label, kind, n, "") for label, kind, n in SCENARIOS]
    if C.BASELINE:
        at = C.BASELINE["commit"]
        # Not redis: its key layout changed with issue 19 (keys hashed per stream), and the
        # probe that sees a stream completed reads today's layout.
        runs += [
            (f"{label} @{at}", kind, n, C.BASELINE["src"])
            for label, kind, n in SCENARIOS
            if kind != "redis"
        ]
    results: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _, _ in runs}
    for rep in range(reps):
        for label, kind, replicas, src in runs:
            print(f"resume: {label} run {rep + 1}/{reps}", file=sys.stderr, flush=True)
            try:
                results[label].append(run_scenario(kind, replicas, notifications, resumes, src))
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                results[label].append({"error": f"failed: {str(exc).strip()[-300:]}"})
    return results


def summary(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Over every timed sample of every repetition: median and max of each figure, the
    median of the cold (first) resumes; None if any repetition failed."""
    if not runs or any("error" in r for r in runs):
        return None
    samples = [s for r in runs for s in r["samples"]]
    colds = [r["cold"] for r in runs]
    return {
        "samples": len(samples),
        "median": {k: statistics.median(s[k] for s in samples) for k in KEYS},
        "max": {k: max(s[k] for s in samples) for k in KEYS},
        "cold": {k: statistics.median(c[k] for c in colds) for k in KEYS},
        "client_cpu_share": max(r["client_cpu_share"] for r in runs),
    }


def resume_table(results: dict[str, list[dict[str, Any]]], notifications: int) -> str:
    lines = [
        "| resume (GET + Last-Event-ID after the call finished) | samples "
        f"| GET → headers ms | → first event ms | → {notifications:,}th ms | → response ms "
        f"| max: first / {notifications:,}th ms | cold: first / {notifications:,}th ms "
        "| resume client CPU |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for label, runs in results.items():
        s = summary(runs)
        if s is None:
            lines.append(f"| {label} | n/a | | | | | | | |")
            continue
        m, mx, cold = s["median"], s["max"], s["cold"]
        lines.append(
            f"| {label} | {s['samples']} | {m['headers_ms']:.1f} | {m['first_ms']:.1f} "
            f"| {m['nth_ms']:.1f} | {m['response_ms']:.1f} "
            f"| {mx['first_ms']:.1f} / {mx['nth_ms']:.1f} "
            f"| {cold['first_ms']:.1f} / {cold['nth_ms']:.1f} "
            f"| {s['client_cpu_share'] * 100:.0f} % |"
        )
    return "\n".join(lines)


def resume_notes(results: dict[str, list[dict[str, Any]]]) -> list[str]:
    return [
        f"resume {label}: n/a, {r['error']}"
        for label, runs in results.items()
        for r in runs
        if "error" in r
    ]
