"""When a stdio server that exited on its own is started again, and when it is not.

A session's server that exits after the handshake is restarted (``upstream.restart``)
after a jittered backoff (:class:`~proxy.backoff.Backoff`: 0.1 s doubling up to 10 s).
More than ``upstream.restart_max`` exits within ``upstream.restart_window_seconds`` is a
crash loop: the session ends with that reason, and ``/readyz`` says so for a window.
"""

from __future__ import annotations

import time
from collections import deque

from proxy.backoff import Backoff
from proxy.config_upstream import UpstreamConfig


class Respawns:
    def __init__(self, config: UpstreamConfig) -> None:
        self.config = config
        self.exits: deque[float] = deque()
        self.count = 0
        self.backoff = Backoff(first=0.1, cap=10.0)

    def exited(self, reason: str) -> str | None:
        """Note one exit; the crash-loop reason if this one is one too many, else None."""
        now = time.monotonic()
        window = self.config.restart_window_seconds
        self.exits.append(now)
        while self.exits and now - self.exits[0] > window:
            self.exits.popleft()
        if len(self.exits) > self.config.restart_max:
            return (
                f"crash loop: the MCP server exited {len(self.exits)} times within "
                f"{window:g} s (upstream.restart_max={self.config.restart_max}); last: {reason}"
            )
        self.count += 1
        return None

    def delay(self) -> float:
        if len(self.exits) <= 1:
            self.backoff.reset()  # a first exit in a while: back soon
        return self.backoff.next_delay()
