"""The targets of issue 4, judged from one run's figures (pairs within a repetition)."""

from __future__ import annotations

import statistics
from typing import Any

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


def targets_table(
    per_rep: list[dict[str, Row]],
    medians: dict[str, Row],
    memory: dict[str, dict[str, Any]],
    peers: list[str],
    http_sessions: int,
) -> str:
    rows: list[tuple[str, str, bool | None]] = []

    overhead = _paired(per_rep, "proxy+sdk", "direct", "p50_ms", "-")
    rows.append(
        (
            "latency: p50 overhead over direct ≤ 0.5 ms",
            "n/a" if overhead is None else f"{overhead:+.3f} ms (proxy+sdk - direct, paired)",
            None if overhead is None else overhead <= 0.5,
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
        best = _best_peer_ratio(per_rep, peers, ours, "calls_per_s")
        rows.append(
            (
                f"throughput ≥ 2 x the best peer, in front of {upstream}",
                "no peers in this run" if best is None else f"{best:.2f} x (paired)",
                None if best is None else best >= 2,
            )
        )
    vs_direct = _paired(per_rep, "proxy+sdk", "direct", "calls_per_s", "/")
    rows.append(
        (
            "throughput ≥ direct",
            "n/a" if vs_direct is None else f"{vs_direct:.2f} x direct (paired)",
            None if vs_direct is None else vs_direct >= 1,
        )
    )
    burst = _paired(per_rep, "proxy+sdk", "legacy_server.py", "notif_per_s", "/")
    rows.append(
        (
            "burst ≥ 95 % of the upstream's emission rate (the SDK server on stdio)",
            "n/a" if burst is None else f"{burst:.0%} of legacy_server.py alone (paired)",
            None if burst is None else burst >= 0.95,
        )
    )
    vs_http = _paired(per_rep, "proxy+sdk", "direct", "notif_per_s", "/")
    rows.append(
        (
            "(for information) burst vs the same tools served over HTTP by the SDK (direct)",
            "n/a" if vs_http is None else f"{vs_http:.0%} of direct (paired)",
            None,
        )
    )
    raw = medians.get("proxy+raw", {}).get("notif_per_s")
    rows.append(
        (
            "burst ≥ 50,000 notifications/s from the raw emitter",
            "n/a" if raw is None else f"{raw:,.0f}/s",
            None if raw is None else raw >= 50_000,
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

    ratio = mem("proxy+raw", "buffered", "rss_per_payload")
    rows.append(
        (
            "memory: buffered events ≤ 1.5 x their payload",
            "n/a" if ratio is None else f"{ratio:.2f} x",
            None if ratio is None else ratio <= 1.5,
        )
    )
    kb = mem("proxy+raw", "idle", "kb_per_session")
    rows.append(
        (
            "memory: an idle session ≤ 50 KB (not counting its child)",
            "n/a" if kb is None else f"{kb:.1f} KB",
            None if kb is None else kb <= 50,
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
    http = memory.get("proxy+http-upstream", {}).get("concurrent")
    rows.append(
        (
            f"{http_sessions or 1000:,} concurrent sessions against an HTTP upstream",
            ("not run" if http_sessions else "not run: no proxy/upstream/http.py yet")
            if http is None
            else (http.get("error") or _sessions(http)),
            None if http is None else not http.get("error"),
        )
    )
    lines = ["| target | this run | verdict |", "|---|---|---|"]
    lines += [f"| {what} | {value} | {_verdict(ok)} |" for what, value, ok in rows]
    return "\n".join(lines)


def _sessions(p: dict[str, Any]) -> str:
    m = p["metrics"]
    return f"{m['sessions']:,.0f} sessions, all {m['calls']:,.0f} calls answered"
