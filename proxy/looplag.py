"""The event loop's lag, sampled for ``/metrics`` (``mcp_resume_proxy_event_loop_lag_seconds``).

Everything the proxy does for every session runs on one event loop: a callback that holds
it (a long replay framed at once, a burst read without a pause, a large commit made on the
loop) delays every other client's answer by as long. :class:`LoopLag` owns one timer,
due every :data:`INTERVAL_SECONDS`; how late it runs is the loop's lag at that moment.
The gauge is the largest lag of the samples taken in the last :data:`WINDOW_SECONDS` (the
same for every scraper, whenever it scrapes). It is a sample: a stall that ends between
two due times is not seen.

The process's context starts it with the store (:meth:`ProxyContext.open`) and stops it
at shutdown (:meth:`ProxyContext.close`).
"""

from __future__ import annotations

import asyncio
from collections import deque

INTERVAL_SECONDS = 0.1
WINDOW_SECONDS = 10.0


class LoopLag:
    """One periodic timer on the running loop and the lags it saw."""

    def __init__(self, interval: float = INTERVAL_SECONDS, window: float = WINDOW_SECONDS) -> None:
        self._interval = interval
        self._window = window
        self._loop: asyncio.AbstractEventLoop | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._due = 0.0
        self._samples: deque[tuple[float, float]] = deque()  # (loop time, lag seconds)

    @property
    def running(self) -> bool:
        return self._handle is not None

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Sample from now on, on ``loop`` (the running one by default)."""
        if self._handle is not None:
            return
        self._loop = loop if loop is not None else asyncio.get_running_loop()
        self._arm(self._loop.time())

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self, now: float) -> None:
        assert self._loop is not None
        self._due = now + self._interval
        self._handle = self._loop.call_at(self._due, self._tick)

    def _tick(self) -> None:
        assert self._loop is not None
        now = self._loop.time()
        self.note(now, max(0.0, now - self._due))
        self._arm(now)

    def note(self, now: float, lag: float) -> None:
        """One sample: the timer due ``lag`` seconds before ``now`` ran at ``now``."""
        samples = self._samples
        samples.append((now, lag))
        while samples and samples[0][0] < now - self._window:
            samples.popleft()

    def worst(self, now: float | None = None) -> float:
        """The largest lag sampled in the last window (0 before any sample)."""
        if now is None:
            now = self._loop.time() if self._loop is not None else 0.0
        since = now - self._window
        return max((lag for at, lag in self._samples if at >= since), default=0.0)
