"""The targets of issue 23 (closer to the limit), judged from one run's figures.

"Before" is the ``--baseline COMMIT`` twin of each contender (``proxy@COMMIT+raw`` beside
``proxy+raw``), run in the same repetitions; every ratio is taken pair by pair within a
repetition, then the median (``targets._paired``), so that a shared machine's drift
cancels out.
"""

from __future__ import annotations

from typing import Any

from replicas import REPLICA_SCENARIO, summary
from report import STALL_LIMIT_MS, Row, stall_summary
from targets import Target, _at_least, _at_most, _best_peer_ratio, _judged, _paired, _verdict

NPM = "mcp-proxy(npm)+raw"
# (store, least share of the memory store's burst, most p50 added ms, most CPU/call ratio,
# most first-event ratio): sqlite and redis (its Unix socket; redis-tcp: 127.0.0.1) against
# proxy+raw.
STORES = [
    ("sqlite", 0.85, 0.3, 1.25, 2.0),
    ("redis", 0.70, 0.25, None, None),
    ("redis-tcp", 0.70, 0.25, None, None),
]
REPLAY_MS = 50.0
REDIS_REPLAY_VS_MEMORY = 1.5


def baseline_of(per_rep: list[dict[str, Row]], ours: str) -> str | None:
    """The ``--baseline`` twin of ``ours`` in this run (``proxy@abc1234+raw``), if any."""
    rest = ours.removeprefix("proxy")
    for rows in per_rep:
        for name in rows:
            if name.startswith("proxy@") and name.split("+", 1)[-1] == rest.lstrip("+"):
                return name
    return None


def targets23_table(
    per_rep: list[dict[str, Row]],
    medians: dict[str, Row],
    peers: list[str],
    resume: dict[str, list[dict[str, Any]]],
    resume_n: int,
    stall: dict[str, list[dict[str, Any]]],
) -> str:
    rows: list[Target] = []
    base = baseline_of(per_rep, "proxy+raw")
    no_base = "no --baseline in this run"
    rows.append(
        _judged(
            "CPU per legacy call ≤ 0.5 x the baseline's (proxy+raw)",
            _paired(per_rep, "proxy+raw", base, "cpu_us_call", "/") if base else None,
            "{:.2f} x " + (base or "") + " (paired)",
            _at_most(0.5),
            missing=no_base,
        )
    )
    rows.append(
        _judged(
            "CPU per legacy call ≤ 0.2 x npm mcp-proxy's",
            _paired(per_rep, "proxy+raw", NPM, "cpu_us_call", "/"),
            "{:.2f} x (paired)",
            _at_most(0.2),
            missing=f"{NPM} not in this run",
        )
    )
    rows.append(
        _judged(
            "calls/s with 8 callers ≥ 2 x the best peer's (proxy+raw)",
            _best_peer_ratio(per_rep, peers, "proxy+raw", "calls_per_s"),
            "{:.2f} x (paired)",
            _at_least(2.0),
            missing="no peers in this run",
        )
    )
    r = medians.get("proxy+raw", {})
    p50, p99 = r.get("busy_p50_ms"), r.get("busy_p99_ms")
    rows.append(
        _judged(
            "p99 ≤ 2 x p50 under 8 callers (proxy+raw)",
            p99 / p50 if p50 and p99 else None,
            "{:.2f} x " + (f"({p99:.3f} vs {p50:.3f} ms)" if p50 and p99 else ""),
            _at_most(2.0),
        )
    )
    rows.append(
        _judged(
            "burst from the raw emitter ≥ 2 x the baseline's",
            _paired(per_rep, "proxy+raw", base, "notif_per_s", "/") if base else None,
            "{:.2f} x " + (base or "") + " (paired)",
            _at_least(2.0),
            missing=no_base,
        )
    )
    rows.append(
        _judged(
            "proxy CPU per notification ≤ 10 µs (proxy+raw)",
            r.get("cpu_us_notif"),
            "{:.1f} µs",
            _at_most(10.0),
        )
    )
    for store, share, added, cpu, first in STORES:
        ours = f"proxy+{store}"
        if not any(ours in rows_ for rows_ in per_rep):
            continue
        rows.append(
            _judged(
                f"{store}: burst ≥ {share:.0%} of the memory store's",
                _paired(per_rep, ours, "proxy+raw", "notif_per_s", "/"),
                "{:.0%} (paired)",
                _at_least(share),
            )
        )
        rows.append(
            _judged(
                f"{store}: p50 ≤ the memory store's + {added} ms",
                _paired(per_rep, ours, "proxy+raw", "p50_ms", "-"),
                "{:+.3f} ms (paired)",
                _at_most(added),
            )
        )
        for key, what, limit in (
            ("cpu_us_call", "CPU per call", cpu),
            ("first_ms", "first event of a burst", first),
        ):
            if limit is not None:
                rows.append(
                    _judged(
                        f"{store}: {what} ≤ {limit:g} x the memory store's",
                        _paired(per_rep, ours, "proxy+raw", key, "/"),
                        "{:.2f} x (paired)",
                        _at_most(limit),
                    )
                )
    medians_of = {label: summary(runs) for label, runs in resume.items()}
    memory_one = medians_of.get("memory, one replica")
    redis_one = medians_of.get("redis, one replica")
    if memory_one and redis_one:
        ratio = redis_one["median"]["response_ms"] / memory_one["median"]["response_ms"]
        rows.append(
            _judged(
                f"redis: a {resume_n:,}-event replay ≤ {REDIS_REPLAY_VS_MEMORY:g} x memory's",
                ratio,
                "{:.2f} x (medians, GET → response)",
                _at_most(REDIS_REPLAY_VS_MEMORY),
            )
        )
    one = [f"{kind}, one replica" for kind in ("memory", "sqlite", "redis")]
    for label in (*one, REPLICA_SCENARIO):
        s = medians_of.get(label)
        if label in resume:
            rows.append(
                _judged(
                    f"replay of {resume_n:,} events ≤ {REPLAY_MS:g} ms, GET → last byte ({label})",
                    s["median"]["response_ms"] if s else None,
                    "{:.1f} ms (median; max " + (f"{s['max']['response_ms']:.1f})" if s else ")"),
                    _at_most(REPLAY_MS),
                )
            )
    for name, runs in stall.items():  # bench/stall.py
        worst = stall_summary(runs)
        rows.append(
            _judged(
                f"no stalls ({name}): every echo call ≤ {STALL_LIMIT_MS:.0f} ms beside a "
                "50,000-event resume and a 10,000-notification burst",
                None if worst is None else worst["calls_max"],
                "max {:.1f} ms",
                _at_most(STALL_LIMIT_MS),
            )
        )
    lines = ["| target (issue 23) | this run | verdict |", "|---|---|---|"]
    lines += [f"| {what} | {value} | {_verdict(ok)} |" for what, value, ok in rows]
    return "\n".join(lines)
