"""Loop turns (and wall ms) from a session noting an event to its writer going on, through
the group commit (:class:`proxy.store.persist.Persister`) on a Redis store, while a task
beside it spins 1 ms per turn; and the commits a burst of 10,000 events takes.
``PYTHONPATH=DIR .venv/bin/python bench/persist_turns.py unix:///PATH/redis.sock`` (DIR
holds the proxy/ to measure; a redis-server of your own)."""

import asyncio
import secrets
import statistics
import sys
import time

from spinner import Spinner

from proxy.core.journal import Journal
from proxy.store.base import StoreLimits
from proxy.store.fencing import Fence
from proxy.store.persist import Persister
from proxy.store.redis import RedisStore

URL = sys.argv[1]
SPIN = float(sys.argv[2]) if len(sys.argv) > 2 else 0.001


class Noting:
    principal = None

    def __init__(self, epoch: str) -> None:
        self.epoch = epoch
        self.session_id = f"s-{epoch}"

    def client_ids(self, number: int) -> list[int]:
        return [number]


async def main():
    store = RedisStore(URL, "t" + secrets.token_hex(4), StoreLimits())
    await store.open()
    persister = Persister(store, "a", 60.0, Fence("a"))
    spinner = Spinner(SPIN)

    session = Noting("e0")
    persister.note(session, Journal(opened=[1]), "default")
    await persister.wait(persister.ticket)
    spinner.start()
    await asyncio.sleep(0.01)
    ts, ws = [], []
    for n in range(1, 101):
        t0, w0 = spinner.turns, time.perf_counter()
        persister.note(session, Journal(appends=[(1, n, b'{"n":1}', 0)]), "default")
        await persister.wait(persister.ticket)
        ts.append(spinner.turns - t0)
        ws.append((time.perf_counter() - w0) * 1000)
    await spinner.stop()
    # A burst: 10,000 events noted 64 a turn (as the stdio reader does), one session.
    burst = Noting("e1")
    persister.note(burst, Journal(opened=[1]), "default")
    await persister.wait(persister.ticket)
    c0, w0, commits = time.process_time(), time.perf_counter(), persister.commits
    seq = 0
    while seq < 10_000:
        rows = [(1, s, b"x" * 200, 0) for s in range(seq + 1, seq + 65)]
        seq += 64
        persister.note(burst, Journal(appends=rows), "default")
        await asyncio.sleep(0)
    await persister.wait(persister.ticket)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    print(
        f"answer: turns {statistics.median(ts):g} (p90 {sorted(ts)[89]}), "
        f"{statistics.median(ws):.2f} ms;",
        f"burst of {seq}: {persister.commits - commits} commits, "
        f"{wall * 1000:.0f} ms, CPU {cpu / seq * 1e6:.2f} us/event",
    )
    await persister.close()
    await store.close()


asyncio.run(main())
