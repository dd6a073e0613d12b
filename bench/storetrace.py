"""Run ``mcp-resume-proxy`` with its store commits and its wire gate timed (bench only).

``python bench/storetrace.py PROXY-ARGS...`` is ``mcp-resume-proxy PROXY-ARGS...`` with
two wrappers installed from outside (no proxy code changes):

- each ``Store.commit`` (or ``Store.commit_now``) the group commit
  (``proxy.store.persist.Persister``) makes: its wall time, its events, its new stream
  records and completions;
- each ``ClientConn.stored()`` that had to wait (the wire held behind the store): how
  long it waited.

When the proxy exits (SIGTERM: it stops gracefully) the figures go as JSON to the file
named by ``BENCH_STORETRACE_OUT``. ``bench/profile_store.py --trace`` uses it.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy import cli, runtime
from proxy.store import persist
from proxy.store.base import Batch

commits: list[tuple[float, int, int, int]] = []  # (seconds, events, streams, completed)
waits: list[float] = []  # seconds a connection's writer waited for the store
gate_checks = [0]  # stored() calls, waiting or not


def _timed_commit(
    commit: Callable[[Batch, float], Awaitable[None]],
) -> Callable[[Batch, float], Awaitable[None]]:
    async def timed(batch: Batch, now: float) -> None:
        t0 = time.perf_counter()
        await commit(batch, now)
        commits.append(
            (time.perf_counter() - t0, batch.events(), len(batch.streams), len(batch.completed))
        )

    return timed


_persister_init = persist.Persister.__init__


def _timed_commit_now(commit_now: Callable[[Batch, float], Any]) -> Callable[[Batch, float], Any]:
    def timed(batch: Batch, now: float) -> Any:
        t0 = time.perf_counter()
        refused = commit_now(batch, now)
        commits.append(
            (time.perf_counter() - t0, batch.events(), len(batch.streams), len(batch.completed))
        )
        return refused

    return timed


def _init(self: persist.Persister, *args: Any, **kwargs: Any) -> None:
    _persister_init(self, *args, **kwargs)
    store = self.store
    if store.commits_at_once:  # commits made on the loop, without an await
        store.commit_now = _timed_commit_now(store.commit_now)  # type: ignore[method-assign]
    else:
        store.commit = _timed_commit(store.commit)  # type: ignore[method-assign]


_stored = runtime.ClientConn.stored


async def _gated(self: runtime.ClientConn) -> None:
    gate_checks[0] += 1
    if self.gate is not None and self.ticket > self.gate.committed:
        t0 = time.perf_counter()
        await _stored(self)
        waits.append(time.perf_counter() - t0)


def _quantiles(values: list[float], scale: float) -> dict[str, float]:
    if not values:
        return {"n": 0}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]  # noqa: E731
    return {
        "n": len(values),
        "p50": pick(0.5) * scale,
        "p90": pick(0.9) * scale,
        "p99": pick(0.99) * scale,
        "mean": statistics.fmean(values) * scale,
    }


def report() -> dict[str, Any]:
    return {
        "commits": len(commits),
        "commit_us": _quantiles([c[0] for c in commits], 1e6),
        "events_per_commit": _quantiles([float(c[1]) for c in commits], 1.0),
        "commits_with_new_streams": sum(1 for c in commits if c[2]),
        "commits_with_completions": sum(1 for c in commits if c[3]),
        "events": sum(c[1] for c in commits),
        "commit_seconds": sum(c[0] for c in commits),
        "gate_checks": gate_checks[0],
        "gate_wait_us": _quantiles(waits, 1e6),
    }


def main() -> int:
    persist.Persister.__init__ = _init  # type: ignore[method-assign]
    runtime.ClientConn.stored = _gated  # type: ignore[method-assign]
    status = cli.main(sys.argv[1:])
    out = os.environ.get("BENCH_STORETRACE_OUT")
    if out:
        Path(out).write_text(json.dumps(report(), indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())
