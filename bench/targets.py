"""The targets of issues 4, 10 and 11, judged from one run's figures (pairs within a
repetition)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from replicas import REPLICA_SCENARIO, summary
from report import Row


def _paired(per_rep: list[dict[str, Row]], a: str, b: str, key: str, op: str) -> float | None:
    """Median over repetitions of ``a[key] - b[key]`` (op "-") or ``a[key] / b[key]`` ("/")."""
    values: list[float] = []
    for rows in per_rep:
        x, y = rows.get(a, {}).get(key), rows.get(b, {}).get(key)
        if x is not None and y is not None and (op == "-" or y):
            values.append(x - y if op == "-" else x / y)
    return statistics.median(values) if values else None


def _best_peer_ratio(
    per_rep: list[dict[str, Row]], peers: list[str], ours: str, key: str
) -> float | None:
    values: list[float] = []
    suffix = ours.removeprefix("proxy")
    for rows in per_rep:
        mine = rows.get(ours, {}).get(key)
        theirs = [v for p in peers if p.endswith(suffix) and (v := rows.get(p, {}).get(key))]
        if mine is not None and theirs:
            values.append(mine / max(theirs))
    return statistics.median(values) if values else None


def _verdict(ok: bool | None) -> str:
    return "" if ok is None else ("**met**" if ok else "**not met**")


Target = tuple[str, str, bool | None]
"""A row of the table: the target, the figure of this run, whether it is met (None: no
verdict)."""


def _judged(
    what: str,
    value: float | None,
    shown: str,
    met: Callable[[float], bool] | None,
    missing: str = "n/a",
) -> Target:
    """``value`` shown with the format ``shown`` and judged by ``met`` (None: for
    information only); a missing value (None) is shown as ``missing``, with no verdict."""
    if value is None:
        return (what, missing, None)
    return (what, shown.format(value), None if met is None else met(value))


def targets_table(
    per_rep: list[dict[str, Row]],
    medians: dict[str, Row],
    memory: dict[str, dict[str, Any]],
    peers: list[str],
    http_sessions: int,
) -> str:
    rows: list[Target] = []

    rows.append(
        _judged(
            "latency: p50 overhead over direct ≤ 0.5 ms",
            _paired(per_rep, "proxy+sdk", "direct", "p50_ms", "-"),
            "{:+.3f} ms (proxy+sdk - direct, paired)",
            lambda overhead: overhead <= 0.5,
        )
    )
    for name in ("proxy+sdk", "proxy+raw"):
        r = medians.get(name)
        if r and r["p50_ms"] and r["p99_ms"]:
            ok = r["p99_ms"] <= 2 * r["p50_ms"]
            rows.append(
                (f"latency: p99 ≤ 2 x p50 ({name})", f"{r['p99_ms']:.3f} vs {r['p50_ms']:.3f}", ok)
            )
    for ours, upstream in (("proxy+sdk", "the SDK server"), ("proxy+raw", "the raw emitter")):
        rows.append(
            _judged(
                f"throughput ≥ 2 x the best peer, in front of {upstream}",
                _best_peer_ratio(per_rep, peers, ours, "calls_per_s"),
                "{:.2f} x (paired)",
                lambda best: best >= 2,
                missing="no peers in this run",
            )
        )
    rows.append(
        _judged(
            "throughput ≥ direct",
            _paired(per_rep, "proxy+sdk", "direct", "calls_per_s", "/"),
            "{:.2f} x direct (paired)",
            lambda vs_direct: vs_direct >= 1,
        )
    )
    rows.append(
        _judged(
            "burst ≥ 95 % of the upstream's emission rate (the SDK server on stdio)",
            _paired(per_rep, "proxy+sdk", "legacy_server.py", "notif_per_s", "/"),
            "{:.0%} of legacy_server.py alone (paired)",
            lambda burst: burst >= 0.95,
        )
    )
    rows.append(
        _judged(
            "(for information) burst vs the same tools served over HTTP by the SDK (direct)",
            _paired(per_rep, "proxy+sdk", "direct", "notif_per_s", "/"),
            "{:.0%} of direct (paired)",
            None,
        )
    )
    rows.append(
        _judged(
            "burst ≥ 50,000 notifications/s from the raw emitter",
            medians.get("proxy+raw", {}).get("notif_per_s"),
            "{:,.0f}/s",
            lambda raw: raw >= 50_000,
        )
    )
    for name in ("proxy+sdk", "proxy+raw"):
        replay = medians.get(name, {}).get("replay_ms")
        if replay is not None:
            rows.append(
                (f"replay of the burst ≤ 100 ms ({name})", f"{replay:.1f} ms", replay <= 100)
            )

    def mem(name: str, phase: str, key: str) -> float | None:
        p = memory.get(name, {}).get(phase)
        return None if p is None or p.get("error") else float(p["metrics"][key])

    rows.append(
        _judged(
            "memory: buffered events ≤ 1.5 x their payload",
            mem("proxy+raw", "buffered", "rss_per_payload"),
            "{:.2f} x",
            lambda ratio: ratio <= 1.5,
        )
    )
    rows.append(
        _judged(
            "memory: an idle session ≤ 50 KB (not counting its child)",
            mem("proxy+raw", "idle", "kb_per_session"),
            "{:.1f} KB",
            lambda kb: kb <= 50,
        )
    )
    conc = memory.get("proxy+raw", {}).get("concurrent")
    rows.append(
        (
            "concurrent stdio sessions work",
            "n/a" if conc is None else (conc.get("error") or _sessions(conc)),
            None if conc is None else not conc.get("error"),
        )
    )
    rows.append(
        _judged(
            "issue 23: an idle session over an HTTP upstream ≤ 20 KB "
            f"({mem_sessions(memory) or 10000:,} sessions)",
            mem("proxy+http-upstream", "idle", "kb_per_session"),
            "{:.1f} KB",
            lambda kb: kb <= 20,
        )
    )
    http = memory.get("proxy+http-upstream", {}).get("concurrent")
    rows.append(
        (
            f"{http_sessions or 1000:,} concurrent sessions against an HTTP upstream",
            "not run (see the notes)" if http is None else (http.get("error") or _sessions(http)),
            None if http is None else not http.get("error"),
        )
    )
    lines = ["| target | this run | verdict |", "|---|---|---|"]
    lines += [f"| {what} | {value} | {_verdict(ok)} |" for what, value, ok in rows]
    return "\n".join(lines)


def mem_sessions(memory: dict[str, dict[str, Any]]) -> int | None:
    """How many idle sessions the HTTP-upstream idle phase opened, if it ran."""
    p = memory.get("proxy+http-upstream", {}).get("idle")
    return None if p is None or p.get("error") else int(p["metrics"]["sessions"])


def _sessions(p: dict[str, Any]) -> str:
    m = p["metrics"]
    return f"{m['sessions']:,.0f} sessions, all {m['calls']:,.0f} calls answered"


# (store, least share of the memory store's burst rate, most p50 added in ms), issue 10
STORE_TARGETS = [("sqlite", 0.60, 0.3), ("redis", 0.40, 0.6)]
RESUME_FIRST_MS = 20.0
RESUME_NTH_MS = 250.0


def store_targets_table(
    per_rep: list[dict[str, Row]], resume: dict[str, list[dict[str, Any]]], resume_n: int
) -> str:
    """Issue 10: what a persistent store costs against the memory store (paired within a
    repetition, in front of the raw emitter; in front of the SDK server for information),
    and the resume on another replica (the median of every timed resume)."""
    rows: list[Target] = []
    for store, share, added in STORE_TARGETS:
        for ours, memory, judged in (
            (f"proxy+{store}", "proxy+raw", True),
            (f"proxy+{store}-sdk", "proxy+sdk", False),
        ):
            if not any(ours in r for r in per_rep):
                continue
            note = "" if judged else "(for information) "
            rows.append(
                _judged(
                    f"{note}{store}: burst ≥ {share:.0%} of the memory store's ({ours})",
                    _paired(per_rep, ours, memory, "notif_per_s", "/"),
                    "{:.0%} of " + memory + " (paired)",
                    (lambda v, s=share: v >= s) if judged else None,
                )
            )
            rows.append(
                _judged(
                    f"{note}{store}: p50 + ≤ {added} ms over the memory store ({ours})",
                    _paired(per_rep, ours, memory, "p50_ms", "-"),
                    "{:+.3f} ms (paired)",
                    (lambda v, a=added: v <= a) if judged else None,
                )
            )
    s = summary(resume.get(REPLICA_SCENARIO, []))
    if REPLICA_SCENARIO in resume:
        med = s["median"] if s else {}
        mx = s["max"] if s else {}
        for key, what, limit in (
            ("first_ms", "the first replayed event", RESUME_FIRST_MS),
            ("nth_ms", f"the {resume_n:,}th", RESUME_NTH_MS),
        ):
            value = med.get(key)
            rows.append(
                _judged(
                    f"resume on another replica (redis): GET → {what} ≤ {limit:g} ms",
                    value,
                    "{:.1f} ms (median; max " + f"{mx.get(key, 0):.1f})",
                    lambda v, lim=limit: v <= lim,
                )
            )
    lines = ["| target (issue 10) | this run | verdict |", "|---|---|---|"]
    lines += [f"| {what} | {value} | {_verdict(ok)} |" for what, value, ok in rows]
    return "\n".join(lines)


# Issue 11: stateless 2026-07-28 calls through the pooled upstream.
MODERN_P50_ADDED_MS = 0.2
MODERN_VS_NPM = 2.0
NPM_MODERN = "mcp-proxy(npm)+modern"


def _at_most(limit: float) -> Callable[[float], bool]:
    return lambda value: value <= limit


def _at_least(limit: float) -> Callable[[float], bool]:
    return lambda value: value >= limit


def modern_targets_table(per_rep: list[dict[str, Row]], medians: dict[str, Row]) -> str:
    """Issue 11: the modern leg against the legacy path of this proxy (same upstream, the
    raw emitter; in front of the SDK server for information) and against npm
    ``mcp-proxy`` serving the same modern client; all paired within a repetition."""
    rows: list[Target] = []
    for ours, legacy, judged in (
        ("proxy+modern", "proxy+raw", True),
        ("proxy+modern-sdk", "proxy+sdk", False),
    ):
        if not any(ours in r and legacy in r for r in per_rep):
            continue
        note = "" if judged else "(for information) "
        rows.append(
            _judged(
                f"{note}modern p50 ≤ legacy p50 + {MODERN_P50_ADDED_MS} ms ({ours} - {legacy})",
                _paired(per_rep, ours, legacy, "p50_ms", "-"),
                "{:+.3f} ms (paired)",
                _at_most(MODERN_P50_ADDED_MS) if judged else None,
            )
        )
        rows.append(
            _judged(
                f"(for information) modern calls/s vs legacy ({ours} ÷ {legacy}, 8 callers)",
                _paired(per_rep, ours, legacy, "calls_per_s", "/"),
                "{:.2f} x (paired)",
                None,
            )
        )
    for ours, theirs, judged in (
        ("proxy+modern", NPM_MODERN, True),
        ("proxy+modern-sdk", f"{NPM_MODERN}-sdk", False),
    ):
        if not any(ours in r and theirs in r for r in per_rep):
            continue
        note = "" if judged else "(for information) "
        rows.append(
            _judged(
                f"{note}modern calls/s ≥ {MODERN_VS_NPM:g} x npm mcp-proxy's modern calls/s "
                f"(8 callers; {ours} ÷ {theirs})",
                _paired(per_rep, ours, theirs, "calls_per_s", "/"),
                "{:.2f} x (paired)",
                _at_least(MODERN_VS_NPM) if judged else None,
                missing=f"n/a ({theirs} failed)",
            )
        )
        rows.append(
            _judged(
                f"(for information) sequential calls/s, one caller ({ours} ÷ {theirs})",
                _paired(per_rep, ours, theirs, "seq_calls_per_s", "/"),
                "{:.2f} x (paired)",
                None,
            )
        )
        rows.append(
            _judged(
                f"(for information) p50, peer ÷ ours ({theirs} ÷ {ours})",
                _paired(per_rep, theirs, ours, "p50_ms", "/"),
                "{:.2f} x (paired)",
                None,
            )
        )
    lines = ["| target (issue 11) | this run | verdict |", "|---|---|---|"]
    lines += [f"| {what} | {value} | {_verdict(ok)} |" for what, value, ok in rows]
    return "\n".join(lines)
