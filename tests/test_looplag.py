"""The event loop's lag gauge (proxy/looplag.py, ``mcp_resume_proxy_event_loop_lag_seconds``):
one timer, re-armed after each run, notes how late it ran; the gauge is the worst lag of
the last window. Driven by a fake loop (its clock and its timers are the test's)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.config import Config
from proxy.context import ProxyContext
from proxy.looplag import LoopLag
from proxy.registry import Registry


class FakeTimer:
    def __init__(self, at: float, callback: Callable[[], None]) -> None:
        self.at, self.callback, self.cancelled = at, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class FakeLoop:
    """A clock the test moves, and the timers armed on it."""

    def __init__(self) -> None:
        self.now = 100.0
        self.timers: list[FakeTimer] = []

    def time(self) -> float:
        return self.now

    def call_at(self, at: float, callback: Callable[[], None]) -> FakeTimer:
        self.timers.append(FakeTimer(at, callback))
        return self.timers[-1]

    def run_due(self, now: float) -> None:
        """The loop gets to its timers at ``now`` (late by what held it)."""
        self.now = now
        due = [t for t in self.timers if t.at <= now and not t.cancelled]
        self.timers = [t for t in self.timers if t not in due]
        for timer in due:
            timer.callback()


def test_the_gauge_is_the_worst_lag_of_the_window_and_the_timer_rearms() -> None:
    loop = FakeLoop()  # (binary fractions: the sums below are exact)
    lag = LoopLag(interval=0.125, window=8.0)
    lag.start(loop)  # type: ignore[arg-type]
    assert lag.running and [t.at for t in loop.timers] == [100.125]
    assert lag.worst() == 0.0  # no sample yet
    loop.run_due(100.125)  # on time
    assert lag.worst() == 0.0 and [t.at for t in loop.timers] == [100.25]
    loop.run_due(100.5)  # a callback held the loop: the timer ran 0.25 s late
    assert lag.worst() == 0.25
    assert [t.at for t in loop.timers] == [100.625]  # one timer, due an interval after it ran
    loop.run_due(100.625)
    assert lag.worst() == 0.25  # still in the window
    loop.run_due(110.0)  # the timer due at 100.75 ran 9.25 s late: the new worst
    assert lag.worst() == 9.25
    loop.run_due(110.125)
    loop.now = 118.25  # nothing ran meanwhile: samples older than the window are gone
    assert lag.worst() == 0.0
    lag.stop()
    assert not lag.running and all(t.cancelled for t in loop.timers)


def test_note_keeps_only_the_window() -> None:
    lag = LoopLag(interval=0.1, window=1.0)
    lag.note(10.0, 0.5)
    lag.note(10.5, 0.1)
    assert lag.worst(10.6) == 0.5
    lag.note(11.2, 0.05)  # 10.0 falls out of the window
    assert lag.worst(11.2) == 0.1


async def test_the_context_samples_from_open_to_close() -> None:
    context = ProxyContext(Config())
    assert not context.loop_lag.running
    registry = Registry(context)
    await context.open(registry.serve_forwarded)
    assert context.loop_lag.running
    samples: dict[str, Any] = {}
    for line in context.metrics.render().decode().splitlines():
        if line.startswith("mcp_resume_proxy_event_loop_lag_seconds "):
            samples["lag"] = float(line.split()[1])
    assert samples["lag"] >= 0.0  # the gauge is in /metrics
    await registry.shutdown()
    await context.close()
    assert not context.loop_lag.running
