"""The nemesis's fault schedule: seeded, pure (no clock, no I/O), configurable.

A schedule is a list of :class:`Fault`, each at an offset in seconds from the start of
the run, in order. :func:`make_schedule` draws one from a seed: ``count`` faults spread
over ``seconds``, their kinds drawn from ``kinds`` (each kind at least once while
``count`` allows, so a short run still meets every fault it was given), the target
replica and the fault's own parameter (where a cut lands, how long a pause or an outage
lasts) drawn too. The same seed and arguments give the same schedule: print the seed,
replay with ``--seed``.

Kinds (the harness carries them out, tests/nemesis/harness.py):

- ``cut``: every client connection through the cutters is cut after a random number of
  bytes (``value``: the byte offset, counted from the fault on);
- ``kill``: SIGKILL a replica, start it again after ``value`` seconds;
- ``pause``: SIGSTOP a replica for ``value`` seconds (past its lease), then SIGCONT;
- ``redis``: restart Redis (it keeps its keys: an append-only file), down ``value`` seconds;
- ``drain``: SIGTERM a replica whose env sets ``MCP_RESUME_PROXY_DRAIN_SECONDS``, and
  start it again once it has exited;
- ``partition``: cut one replica off Redis (its own link reset and refused,
  tests/nemesis/links.py) for ``value`` seconds, from half a lease to one and a half:
  the others and the clients still reach it;
- ``blackhole``: the same, but nothing says so: nothing flows on that link either way
  for ``value`` seconds (the replica's commands wait out their timeout), then what was
  sent arrives late;
- ``failover``: Redis' master and its replica swap (``FAILOVER TO``: writes paused until
  the replica has them all), and the replicas' links move to the new master for new
  connections (tests/nemesis/failover.py);
- ``stall``: Redis' master frozen (SIGSTOP: a fork's stall, a starved VM) for half a
  lease to one and a half, less than the store's timeout: every command waits it out,
  and lease keys expire by Redis' own clock meanwhile.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

KINDS: tuple[str, ...] = (
    *("cut", "kill", "pause", "redis", "drain", "partition", "blackhole", "failover", "stall"),
)
REDIS_ONLY = ("redis", "partition", "blackhole", "failover", "stall")  # the Redis store's


@dataclass(frozen=True)
class Fault:
    at: float  # seconds from the start of the run
    kind: str
    target: int  # replica index (unused by cut and redis)
    value: float  # cut: byte offset; kill/redis/partition: seconds down; pause: paused

    def describe(self) -> str:
        what = {
            "cut": f"cut client connections after {int(self.value)} bytes",
            "kill": f"SIGKILL replica {self.target}, restart after {self.value:.1f}s",
            "pause": f"SIGSTOP replica {self.target} for {self.value:.1f}s",
            "redis": f"restart Redis ({self.value:.1f}s down)",
            "drain": f"drain replica {self.target} (SIGTERM), then restart it",
            "partition": f"cut replica {self.target} off Redis for {self.value:.1f}s",
            "blackhole": f"blackhole replica {self.target}'s link to Redis for {self.value:.1f}s",
            "failover": "fail Redis over to its replica",
            "stall": f"freeze Redis (SIGSTOP) for {self.value:.1f}s",
        }[self.kind]
        return f"t={self.at:5.1f}s {what}"


def parse_kinds(text: str, store: str = "redis") -> tuple[str, ...]:
    """``"cut,kill"`` -> ``("cut", "kill")``; ``"all"`` or ``""`` -> every kind the
    store has (those of :data:`REDIS_ONLY` are the Redis store's)."""
    known = KINDS if store == "redis" else tuple(k for k in KINDS if k not in REDIS_ONLY)
    if text.strip() in ("", "all"):
        return known
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in known]
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; known: {', '.join(known)}")
    return kinds


def make_schedule(
    seed: int,
    *,
    seconds: float,
    count: int,
    kinds: tuple[str, ...] = KINDS,
    replicas: int = 3,
    lease: float = 2.0,
    start: float = 2.0,
) -> list[Fault]:
    """``count`` faults between ``start`` and ``seconds``, evenly spaced with jitter."""
    if count <= 0 or not kinds:
        return []
    rng = random.Random(seed)
    chosen = list(kinds) * (count // len(kinds)) + rng.sample(list(kinds), count % len(kinds))
    rng.shuffle(chosen)
    span = max(seconds - start, 1.0) / count
    faults = []
    for i, kind in enumerate(chosen):
        at = start + span * i + rng.uniform(0, span * 0.5)
        target = rng.randrange(replicas)
        values = {
            "cut": float(rng.randrange(1, 6000)),
            "kill": rng.uniform(0.5, 2.0),
            "pause": lease * rng.uniform(1.5, 2.5),
            "redis": rng.uniform(0.2, 1.5),
            "drain": 0.0,
        }
        # Half a lease to one and a half (as many draws as before partitions were added:
        # a seed of a run without them draws the same schedule).
        values["partition"] = values["blackhole"] = values["stall"] = values["pause"] - lease
        values["failover"] = 0.0
        value = values[kind]
        faults.append(Fault(round(at, 2), kind, target, round(value, 2)))
    return faults
