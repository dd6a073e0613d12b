"""proxy/metrics_batch.py: observations handed over in batches give the child exactly
the buckets, count and sum that observing each would have given."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram

from proxy.metrics_batch import BATCH, BatchedHistogram

BOUNDS = (0.001, 0.005, 0.01, 0.1, 1, 10)


def _samples(histogram: Histogram) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels.get("le", "")): s.value
        for metric in histogram.collect()
        for s in metric.samples
        if not s.name.endswith("_created")
    }


def test_batches_add_what_each_observation_would(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.choice([0.001, 0.01, 10.0, 99.0, 0.0]) or rng.random() for _ in range(700)]
    one = Histogram("one", "", ["m"], buckets=BOUNDS, registry=CollectorRegistry())
    batched = Histogram("one", "", ["m"], buckets=BOUNDS, registry=CollectorRegistry())
    child = BatchedHistogram(batched.labels("x"))
    for value in values:
        one.labels("x").observe(value)
        child.observe(value)
    kept = len(values) % BATCH
    assert _samples(batched)[("one_count", "")] == len(values) - kept  # whole batches only
    child.flush()
    ours, theirs = _samples(batched), _samples(one)
    assert ours.keys() == theirs.keys()
    for key, value in theirs.items():
        assert abs(ours[key] - value) <= 1e-9 * max(1.0, abs(value)), key


def test_a_child_without_its_parts_is_observed_value_by_value() -> None:
    seen: list[float] = []

    class Plain:
        def observe(self, value: float) -> None:
            seen.append(value)

    child = BatchedHistogram(Plain())
    child.observe(0.5)
    child.observe(2.0)
    child.flush()
    child.flush()
    assert seen == [0.5, 2.0]
