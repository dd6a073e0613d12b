"""Where a nemesis run's time went (tests/nemesis/timeline.py), on a hand-turned clock:
phases nest, each is timed once it ends, and those still running (a hang) say so."""

from __future__ import annotations

import pytest

from tests.nemesis.timeline import Timeline


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_phases_are_timed_in_the_order_they_end_and_a_running_one_says_so() -> None:
    clock = Clock()
    timeline = Timeline(clock)
    with timeline.phase("start"):
        clock.now += 4.0
    with pytest.raises(RuntimeError), timeline.phase("faults"):
        with timeline.phase("fault kill"):
            clock.now += 2.5
        with timeline.phase("fault pause"):
            clock.now += 6.0
            assert timeline.describe().splitlines() == [
                "  start: 4.0s",
                "  fault kill: 2.5s",
                "  faults: still running after 8.5s",
                "  fault pause: still running after 6.0s",
            ]
            raise RuntimeError("a phase that fails is timed all the same")
    assert timeline.done == [
        ("start", 4.0),
        ("fault kill", 2.5),
        ("fault pause", 6.0),
        ("faults", 8.5),
    ]
    assert timeline.running == []
