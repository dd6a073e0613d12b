"""Where a nemesis run's time went: its phases (starting the cluster, carrying out the
faults, waiting for the calls to end, the audit, stopping) and each fault, in the order
they ran, with how long each took.

The run is bounded by its work, not by a wall-clock budget: a fixed number of faults,
each call bounded by ``Settings.bound``, every read of the audit bounded, every process
start and stop bounded by its own deadline. On a loaded machine it takes longer and does
the same work. The test guards only against a hang (:data:`HANG_S`, under the test
command's per-test timeout) and, then, says which phase was running and how long each
before it took, so a slow run says what was slow instead of failing on a total.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

HANG_S = 270.0
"""Past this the nemesis counts as hung (pytest-timeout ends any test at 300 s; this
fails first, with the timeline). A quiet machine takes about a minute."""


@dataclass
class Timeline:
    """Phases as they start and end (``clock``: seconds, monotonic)."""

    clock: Callable[[], float] = time.monotonic
    done: list[tuple[str, float]] = field(default_factory=list)  # name, seconds taken
    running: list[tuple[str, float]] = field(default_factory=list)  # name, began; nested

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the ``with`` body as phase ``name`` (phases nest: a fault within the
        faults)."""
        began = self.clock()
        self.running.append((name, began))
        try:
            yield
        finally:
            self.running.remove((name, began))
            self.done.append((name, self.clock() - began))

    def describe(self) -> str:
        """Every phase done, in the order they ended, then those still running."""
        lines = [f"  {name}: {took:.1f}s" for name, took in self.done]
        now = self.clock()
        lines += [
            f"  {name}: still running after {now - began:.1f}s" for name, began in self.running
        ]
        return "\n".join(lines)
