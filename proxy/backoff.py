"""Retry delays with jitter, for everything that reconnects: upstream transports and the
stdio shim."""

from __future__ import annotations

import random


class Backoff:
    """Exponential backoff with full jitter: 0.1 s doubling up to ``cap`` seconds."""

    def __init__(self, first: float = 0.1, cap: float = 5.0) -> None:
        self.first = first
        self.cap = cap
        self.attempt = 0

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.first * (2**self.attempt))
        self.attempt += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0
