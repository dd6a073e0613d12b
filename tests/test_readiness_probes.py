"""How often ``/readyz`` starts a server to probe it when no session proves it can be had
(proxy/readiness.py): every 10 s while it fails, less and less often while it keeps being
good (10, 20, 40 ... 300 s), back to 10 s at the first failure. Real probes of the bundled
demo server (a failing one: a command that exits at once), on a fake clock."""

from __future__ import annotations

import itertools
import sys

import pytest

from proxy import readiness
from proxy.config import config_from_mapping
from proxy.readiness import PROBE_MAX_SECONDS, PROBE_SECONDS, ServerReadiness
from proxy.servers import Server, servers_of
from tests.support import DEMO

FAILS = [sys.executable, "-c", "import sys; sys.exit(3)"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def server_running(command: list[str]) -> Server:
    config = config_from_mapping({"upstream": {"command": command, "stop_grace_seconds": 1}})
    (server,) = servers_of(config).values()
    return server


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The times (fake clock's) at which a real probe started."""
    started: list[float] = []
    real = readiness.probe

    async def counted(*args: object) -> None:
        started.append(-1.0)  # replaced by the test's clock reading below
        await real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(readiness, "probe", counted)
    return started


async def ticks(part: ServerReadiness, clock: Clock, until: float, probes: list[float]) -> None:
    """Ask every second until ``until`` (as a balancer does), noting when probes ran."""
    while clock.now < until:
        before = len(probes)
        await part.check()
        if len(probes) > before:
            probes[-1] = clock.now
        clock.now += 1.0


async def test_a_good_idle_server_is_probed_less_and_less_often(probes: list[float]) -> None:
    clock = Clock()
    start = clock.now
    part = ServerReadiness(server_running(DEMO), None, clock)
    await ticks(part, clock, start + 1000, probes)
    gaps = [b - a for a, b in itertools.pairwise(probes)]
    assert gaps[:5] == [PROBE_SECONDS, 2 * PROBE_SECONDS, 4 * PROBE_SECONDS, 80, 160]
    assert set(gaps[5:]) == {PROBE_MAX_SECONDS}, gaps
    assert await part.check() is None


async def test_a_reported_failure_or_a_failed_probe_brings_10_s_back(probes: list[float]) -> None:
    clock = Clock()
    start = clock.now
    server = server_running(DEMO)
    part = ServerReadiness(server, None, clock)
    await ticks(part, clock, start + 100, probes)  # probes at 0, 10, 30, 70: kept 80 s now
    assert [t - start for t in probes] == [0, 10, 30, 70]
    server.health.failing("a transport lost the server")  # as an HTTP upstream reports
    await ticks(part, clock, start + 105, probes)  # 10 s after the last probe: now
    assert [t - start for t in probes[4:]] == [100]
    probes.clear()
    await ticks(part, clock, start + 150, probes)  # good again: from 10 s on
    assert [t - start for t in probes] == [110, 130]

    failing = ServerReadiness(server_running(FAILS), None, clock)
    probes.clear()
    at = clock.now
    await ticks(failing, clock, at + 45, probes)
    assert [t - at for t in probes] == [0, 10, 20, 30, 40]
    assert await failing.check() is not None


async def test_a_reload_that_changes_the_server_forgets_the_good_answer(
    probes: list[float],
) -> None:
    clock = Clock()
    start = clock.now
    server = server_running(DEMO)
    part = ServerReadiness(server, None, clock)
    await ticks(part, clock, start + 100, probes)  # good, kept 80 s now
    assert len(probes) == 4
    reloaded = config_from_mapping({"upstream": {"command": FAILS, "stop_grace_seconds": 1}})
    server.config = reloaded.for_server(reloaded.upstream)  # as proxy/reload.py does
    assert await part.check() is not None  # probed at once: the new command fails
    assert len(probes) == 5
