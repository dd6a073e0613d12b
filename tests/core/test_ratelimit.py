"""The per-principal token bucket (proxy/core/ratelimit.py): bursts, refill, Retry-After,
bounded memory, and a property: never more allowed than burst + rate * elapsed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.ratelimit import RateLimiter


def test_a_burst_then_one_token_per_interval() -> None:
    limiter = RateLimiter(6)  # 6 a minute: one every 10 s, bursts of 6
    assert [limiter.take("alice", 0.0) for _ in range(6)] == [None] * 6
    retry = limiter.take("alice", 0.0)
    assert retry == pytest.approx(10.0)
    assert limiter.take("alice", 4.0) == pytest.approx(6.0)  # a refusal takes nothing
    assert limiter.take("alice", 10.0) is None
    assert limiter.take("alice", 10.0) == pytest.approx(10.0)


def test_keys_have_buckets_of_their_own() -> None:
    limiter = RateLimiter(1)
    assert limiter.take("alice", 0.0) is None
    assert limiter.take("alice", 1.0) is not None
    assert limiter.take("bob", 1.0) is None


def test_waiting_the_retry_after_is_enough() -> None:
    limiter = RateLimiter(7)
    now = 0.0
    for _ in range(7):
        assert limiter.take("k", now) is None
    for _ in range(50):
        retry = limiter.take("k", now)
        assert retry is not None and retry > 0
        now += retry
        assert limiter.take("k", now) is None


def test_a_clock_that_steps_back_refills_nothing() -> None:
    limiter = RateLimiter(1)
    assert limiter.take("k", 100.0) is None
    assert limiter.take("k", 50.0) is not None


def test_full_buckets_are_forgotten() -> None:
    limiter = RateLimiter(60)  # one token a second
    for i in range(1000):
        assert limiter.take(f"p{i}", 0.0) is None
    assert len(limiter) == 1000
    assert limiter.take("p0", 0.5) is None  # p0 is not full yet: it, and all after, stay
    assert len(limiter) == 1000
    assert limiter.take("late", 2.5) is None
    assert len(limiter) == 1  # every other bucket had refilled


def test_the_table_is_capped() -> None:
    limiter = RateLimiter(2, max_keys=3)
    for key in ("a", "b", "c", "d"):
        assert limiter.take(key, 0.0) is None
    assert len(limiter) == 3  # "a", the least recently used, went
    assert limiter.take("a", 0.0) is None  # ... and starts over with a full bucket


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        RateLimiter(0)
    with pytest.raises(ValueError):
        RateLimiter(5, max_keys=0)


@given(
    per_minute=st.integers(min_value=1, max_value=120),
    max_keys=st.integers(min_value=3, max_value=10),
    steps=st.lists(
        st.tuples(st.sampled_from("abc"), st.floats(min_value=0.0, max_value=5.0)),
        max_size=300,
    ),
)
def test_never_more_than_burst_plus_rate_times_elapsed(
    per_minute: int, max_keys: int, steps: list[tuple[str, float]]
) -> None:
    limiter = RateLimiter(per_minute, max_keys=max_keys)  # 3 keys: the cap never bites
    now = 0.0
    first: dict[str, float] = {}
    allowed: dict[str, int] = {}
    for key, dt in steps:
        now += dt
        first.setdefault(key, now)
        retry = limiter.take(key, now)
        if retry is None:
            allowed[key] = allowed.get(key, 0) + 1
        else:
            assert 0 < retry <= 60.0 / per_minute + 1e-6
        budget = per_minute + (now - first[key]) * per_minute / 60.0
        assert allowed.get(key, 0) <= budget + 1e-6
    assert len(limiter) <= 3
