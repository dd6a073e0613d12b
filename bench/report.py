"""Turn the runner's raw phase results into the markdown tables of bench/README.md.

Figures are medians over repetitions. Ratios to the best peer are computed pair by pair:
in each repetition (every contender ran once, one after the other), this proxy's figure
is divided by the best peer's figure of that same repetition; the table shows the median
of those ratios, so slow drifts of a shared machine cancel out.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

Row = dict[str, float | None]
Phases = list[dict[str, Any]]


def _metric(by: dict[str, dict[str, Any]], phase: str, key: str) -> float | None:
    p = by.get(phase)
    if p is None or p.get("error"):
        return None
    value = p["metrics"].get(key)
    return None if value is None else float(value)


KEYS = [
    "p50_ms",
    "p99_ms",
    "seq_calls_per_s",
    "calls_per_s",
    "busy_p50_ms",
    "busy_p99_ms",
    "long_first_ms",
    "long_last_ms",
    "notif_per_s",
    "first_ms",
    "replay_ms",
    "cpu_us_call",
    "cpu_us_notif",
    "rss_mb",
    "load_cpu",
]


def load_row(phases: Phases) -> Row:
    """One repetition's figures for one contender (all None if the run failed)."""
    if not phases:
        return dict.fromkeys(KEYS)
    by = {p["name"]: p for p in phases}
    lat, thr, burst = by["latency"], by["throughput"], by["burst"]
    # A failed phase (contextforge's throughput: wrong answers) counts neither calls nor CPU.
    counted = [p for p in (lat, thr) if p["metrics"].get("calls")]
    calls = sum(p["metrics"]["calls"] for p in counted)
    cpu_call = sum(p["server_cpu_s"] for p in counted) / calls * 1e6 if calls else None
    notified = burst["metrics"].get("notifications")
    return {
        "p50_ms": _metric(by, "latency", "p50_ms"),
        "p99_ms": _metric(by, "latency", "p99_ms"),
        "seq_calls_per_s": (lambda mean: None if not mean else 1000 / mean)(
            _metric(by, "latency", "mean_ms")
        ),
        "calls_per_s": _metric(by, "throughput", "calls_per_s"),
        "busy_p50_ms": _metric(by, "throughput", "p50_ms"),  # under the 8 callers
        "busy_p99_ms": _metric(by, "throughput", "p99_ms"),
        "long_first_ms": _metric(by, "long", "first_p50_ms"),
        "long_last_ms": _metric(by, "long", "last_p50_ms"),
        "notif_per_s": _metric(by, "burst", "notif_per_s"),
        "first_ms": _metric(by, "burst", "first_ms"),
        "replay_ms": _metric(by, "replay", "replay_ms"),
        "cpu_us_call": cpu_call,
        "cpu_us_notif": burst["server_cpu_s"] / notified * 1e6 if notified else None,
        "rss_mb": max(p["server_rss_mb"] for p in phases),
        "load_cpu": max(p["client_cpu_share"] for p in phases),
    }


def median_row(rows: list[Row]) -> Row:
    """The median of each figure; n/a if any repetition lacks it (a phase that failed once
    is not shown as if it worked)."""
    out: Row = {}
    for key in rows[0]:
        present = [v for r in rows if (v := r[key]) is not None]
        out[key] = statistics.median(present) if len(present) == len(rows) else None
    return out


def errors_of(name: str, runs: list[Phases]) -> list[str]:
    """One note per phase that failed: in how many repetitions, and the first reason."""
    seen: dict[str, tuple[int, str]] = {}
    for phases in runs:
        for p in phases:
            if p.get("error"):
                count, first = seen.get(p["name"], (0, p["error"]))
                seen[p["name"]] = (count + 1, first)
    return [
        f"{name} {phase}: n/a ({count} of {len(runs)} repetitions), {error}"
        for phase, (count, error) in seen.items()
    ]


def fmt(value: float | None, digits: int, suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}{suffix}"


def load_table(results: dict[str, Row], sessions: int) -> str:
    lines = [
        f"| contender | p50 ms | p99 ms | calls/s ({sessions} sessions) "
        "| long session p50 ms, first → last 500 | burst notif/s | first ms | replay ms "
        "| CPU µs/call | CPU µs/notification | RSS MB | load client CPU |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, r in results.items():
        long = (
            "n/a"
            if r["long_first_ms"] is None or r["long_last_ms"] is None
            else f"{r['long_first_ms']:.3f} → {r['long_last_ms']:.3f}"
        )
        lines.append(
            f"| {name} | {fmt(r['p50_ms'], 3)} | {fmt(r['p99_ms'], 3)} "
            f"| {fmt(r['calls_per_s'], 0)} | {long} | {fmt(r['notif_per_s'], 0)} "
            f"| {fmt(r['first_ms'], 1)} | {fmt(r['replay_ms'], 1)} "
            f"| {fmt(r['cpu_us_call'], 0)} | {fmt(r['cpu_us_notif'], 1)} "
            f"| {fmt(r['rss_mb'], 1)} | {fmt((r['load_cpu'] or 0) * 100, 0)} % |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- ratios to the best peer

# (row key, label, higher is better)
RATIO_METRICS = [
    ("p50_ms", "latency p50 (peer ÷ ours: > 1 is faster)", False),
    ("calls_per_s", "calls/s (ours ÷ peer)", True),
    ("notif_per_s", "burst notifications/s (ours ÷ peer)", True),
    ("replay_ms", "replay time (peer ÷ ours)", False),
]


def ratio_table(ours: str, peers: list[str], reps: list[dict[str, Row]]) -> str:
    lines = [
        f"| metric | {ours} | best peer (this run) | ratio, median of per-repetition pairs |",
        "|---|--:|---|--:|",
    ]
    for key, label, higher in RATIO_METRICS:
        ratios: list[float] = []
        best_names: list[str] = []
        ours_values: list[float] = []
        for rows in reps:
            mine = rows.get(ours, {}).get(key)
            candidates = [(rows[p][key], p) for p in peers if rows.get(p, {}).get(key)]
            if mine is None or not candidates:
                continue
            value, name = max(candidates) if higher else min(candidates)
            assert value is not None
            ratios.append(mine / value if higher else value / mine)
            best_names.append(name)
            ours_values.append(mine)
        if not ratios:
            lines.append(f"| {label} | n/a | n/a (no peer can) | n/a |")
            continue
        best = max(set(best_names), key=best_names.count)
        mine = statistics.median(ours_values)
        lines.append(
            f"| {label} | {mine:,.{3 if mine < 100 else 0}f} | {best} "
            f"| {statistics.median(ratios):.2f} x |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- memory and sessions


def _buffered(m: dict[str, float]) -> str:
    return f"{m['rss_per_payload']:.2f} x ({m['payload_mb']:.0f} MiB)"


def _idle(m: dict[str, float]) -> str:
    return f"{m['kb_per_session']:.1f} ({m['sessions']:.0f})"


def _concurrent(m: dict[str, float]) -> str:
    return f"all {m['calls']:,.0f} in {m['sessions']:,.0f} sessions, {m['calls_per_s']:,.0f}/s"


def memory_table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = [
        "| contender | RSS growth / buffered payload | KB per idle session (sessions) "
        "| concurrent sessions: calls answered, calls/s |",
        "|---|--:|--:|--:|",
    ]

    def cell(phases: dict[str, Any], phase: str, show: Callable[[dict[str, float]], str]) -> str:
        p = phases.get(phase)
        if p is None:
            return "not run"
        return "n/a" if p.get("error") else show(p["metrics"])

    for name, phases in results.items():
        lines.append(
            f"| {name} | {cell(phases, 'buffered', _buffered)} | {cell(phases, 'idle', _idle)} "
            f"| {cell(phases, 'concurrent', _concurrent)} |"
        )
    return "\n".join(lines)


def memory_notes(results: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    return [
        f"{name} {phase}: n/a, {p['error']}"
        for name, phases in results.items()
        for phase, p in phases.items()
        if p.get("error")
    ]


def store_table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """The buffered phase's store growth per event (contenders with a persistent store):
    sqlite, the files (db + wal), and the database as read through the WAL (page_count x
    page_size); redis, INFO used_memory, and MEMORY USAGE of the namespace's keys."""
    lines = [
        "| contender | events stored | store growth | per event | payload per event "
        "| overhead per event | overhead / payload | data only per event |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, phases in results.items():
        p = phases.get("buffered")
        if p is None or p.get("error") or "store_events" not in p["metrics"]:
            continue
        m = p["metrics"]
        lines.append(
            f"| {name} | {m['store_events']:,.0f} | {m['store_mb']:,.1f} MiB "
            f"| {m['store_bytes_per_event']:,.1f} B | {m['store_payload_per_event']:,.1f} B "
            f"| {m['store_overhead_per_event']:+,.1f} B "
            f"| {m['store_overhead_per_event'] / m['store_payload_per_event']:.2f} x "
            f"| {fmt(m.get('store_data_per_event'), 1, ' B')} |"
        )
    return "\n".join(lines) if len(lines) > 2 else ""


STALL_LIMIT_MS = 20.0  # issue 23: no echo call slower than this beside a resume and a burst


def stall_summary(runs: list[dict[str, Any]]) -> dict[str, float] | None:
    """One contender's stall phase over its repetitions: the worst of each figure (the
    target is about every call), the median of the operations' times; None if any failed."""
    if not runs or any("error" in r or not r["calls"].get("n") for r in runs):
        return None
    worst = {
        f"{part}_{k}": max(r[part][k] for r in runs if r[part].get("n"))
        for part in ("calls", "probe", "client_lag")
        for k in ("p99", "max")
        if any(r[part].get("n") for r in runs)
    }
    return {
        **worst,
        "calls_n": sum(r["calls"]["n"] for r in runs),
        "calls_p50": statistics.median(r["calls"]["p50"] for r in runs),
        "resume_ms": statistics.median(r["resume_ms"] for r in runs),
        "burst_ms": statistics.median(r["burst_ms"] for r in runs),
    }


def stall_table(stall: dict[str, list[dict[str, Any]]]) -> str:
    """The no-stall phase (bench/stall.py): echo callers beside a 50,000-event resume and
    a 10,000-notification burst."""
    lines = [
        "| no stalls (8 echo callers beside a 50,000-event resume and a 10,000 burst) "
        "| calls in the window | echo p50 ms | echo p99 ms | **echo max ms** "
        "| /healthz probe max ms | callers' own loop lag max ms | resume ms | burst ms |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, runs in stall.items():
        s = stall_summary(runs)
        if s is None:
            errors = "; ".join(r.get("error", "no call in the window") for r in runs)
            lines.append(f"| {name} | n/a: {errors[:200]} | | | | | | | |")
            continue
        lines.append(
            f"| {name} | {s['calls_n']:.0f} | {s['calls_p50']:.1f} | {s['calls_p99']:.1f} "
            f"| {s['calls_max']:.1f} | {s.get('probe_max', float('nan')):.1f} "
            f"| {s.get('client_lag_max', float('nan')):.1f} | {s['resume_ms']:.0f} "
            f"| {s['burst_ms']:.0f} |"
        )
    return "\n".join(lines)
