"""redis-server's own time per commit script (``INFO commandstats``: ``EVALSHA``'s
``usec_per_call``), for a call's commit (its record, one event, its ending: one batch)
and for a burst's slice (``PER`` events of one stream).
``PYTHONPATH=DIR .venv/bin/python bench/redis_commit_cost.py unix:///PATH/redis.sock [N] [PER]``
(DIR holds the proxy/ to measure; a redis-server of your own; CONFIG RESETSTAT is run).
Prints the best and the median of 5 rounds of N commits of each kind."""

import asyncio
import secrets
import statistics
import sys
import time

import redis

from proxy.store.base import Batch, Entry, StoreLimits, StreamRecord
from proxy.store.redis import RedisStore

URL = sys.argv[1]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 300
PER = int(sys.argv[3]) if len(sys.argv) > 3 else 64
ROUNDS = int(__import__("os").environ.get("ROUNDS", 5))


def evalsha_usec(admin: redis.Redis) -> tuple[int, float]:
    stats = admin.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), float(stats.get("usec", 0))


async def main() -> None:
    admin = redis.Redis.from_url(URL)
    store = RedisStore(URL, "c" + secrets.token_hex(4), StoreLimits())
    await store.open()
    payload = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"x"}]}}'
    calls: list[float] = []
    bursts: list[float] = []
    number = 0
    for _ in range(ROUNDS):
        admin.config_resetstat()
        for _ in range(N):
            number += 1
            key = f"e{number % 97}.{number}"
            now = time.time()
            batch = Batch(
                streams=[StreamRecord(key, "s", "a", fence="f")],
                appends={key: [Entry(1, payload, 1)]},
                completed={key: now + 300},
                fence="f",
                owner="a",
            )
            await store.commit(batch, now)
        count, usec = evalsha_usec(admin)
        calls.append(usec / count)
        admin.config_resetstat()
        number += 1
        key = f"b.{number}"
        now = time.time()
        await store.commit(Batch(streams=[StreamRecord(key, "s", "a")], fence="f", owner="a"), now)
        admin.config_resetstat()
        for n in range(N):
            seqs = range(1 + n * PER, 1 + (n + 1) * PER)
            batch = Batch(appends={key: [Entry(s, b"x" * 200, 0) for s in seqs]}, fence="f")
            await store.commit(batch, now)
        count, usec = evalsha_usec(admin)
        bursts.append(usec / count)
    await store.close()
    print(
        f"call commit: best {min(calls):.1f} median {statistics.median(calls):.1f} usec;"
        f" {PER}-event slice: best {min(bursts):.1f} median {statistics.median(bursts):.1f} usec"
    )


asyncio.run(main())
