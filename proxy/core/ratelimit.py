"""A token bucket per key (a principal), sans-I/O: the caller passes ``now``.

Each key may take ``per_minute`` actions per minute, with bursts of up to ``per_minute``:
its bucket holds at most that many tokens, refills at ``per_minute / 60`` tokens a
second, and every allowed action takes one. A refused action takes nothing and learns how
long until the next token (the ``Retry-After`` of a 429, RFC 9110 §10.2.3).

Memory is bounded: a bucket that has refilled is the same as no bucket, so it is
forgotten; and the table holds at most ``max_keys`` buckets (past that, the one least
recently used goes, which hands that key a full bucket again: a leak in the limit that
only a flood of distinct keys can open, preferred to refusing new keys).
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_KEYS = 100_000
_EPSILON = 1e-9  # float slack: a token due at exactly ``now`` is there


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """At most ``per_minute`` actions a minute per key (bursts up to ``per_minute``)."""

    def __init__(self, per_minute: int, *, max_keys: int = MAX_KEYS) -> None:
        if per_minute < 1:
            raise ValueError(f"per_minute must be at least 1, got {per_minute}")
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, got {max_keys}")
        self.burst = float(per_minute)
        self.rate = per_minute / 60.0  # tokens a second
        self.max_keys = max_keys
        # Least recently updated first (a dict keeps insertion order; a take re-inserts).
        self._buckets: dict[str, _Bucket] = {}

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: str, now: float) -> float | None:
        """Take one token of ``key``'s bucket: None when allowed, else the seconds until
        the next token (nothing is taken then)."""
        self._forget_full(now)
        bucket = self._buckets.pop(key, None)
        if bucket is None:
            if len(self._buckets) >= self.max_keys:
                del self._buckets[next(iter(self._buckets))]  # the least recently used
            tokens = self.burst
        else:
            tokens = self._level(bucket, now)
        if tokens >= 1.0 - _EPSILON:
            self._buckets[key] = _Bucket(max(tokens - 1.0, 0.0), now)
            return None
        self._buckets[key] = _Bucket(tokens, now)
        return (1.0 - tokens) / self.rate

    def _level(self, bucket: _Bucket, now: float) -> float:
        elapsed = max(now - bucket.updated, 0.0)  # a clock that steps back refills nothing
        return min(self.burst, bucket.tokens + elapsed * self.rate)

    def _forget_full(self, now: float) -> None:
        """Drop buckets that have refilled, oldest first. Every bucket is full at most
        ``burst / rate`` (60) seconds after its update, so whatever stays is recent:
        amortized O(1) a take."""
        while self._buckets:
            key = next(iter(self._buckets))
            if self._level(self._buckets[key], now) < self.burst - _EPSILON:
                return
            del self._buckets[key]
