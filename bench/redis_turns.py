"""Loop turns and wall time per Redis store command (commit of 1 and 256 events, read of
1,000) while a task beside it spins 1 ms per turn; then CPU per idle commit.
``PYTHONPATH=DIR .venv/bin/python bench/redis_turns.py redis://127.0.0.1:PORT/0`` (DIR
holds the proxy/ to measure; a redis-server of your own on PORT)."""

import asyncio
import secrets
import statistics
import sys
import time

from spinner import Spinner

from proxy.store.base import Batch, Entry, StoreLimits, StreamRecord
from proxy.store.redis import RedisStore

URL = sys.argv[1]
SPIN = float(sys.argv[2]) if len(sys.argv) > 2 else 0.001


async def main():
    store = RedisStore(URL, "t" + secrets.token_hex(4), StoreLimits())
    await store.open()
    spinner = Spinner(SPIN)

    now = time.time()
    for i in range(1, 9):
        await store.commit(Batch(streams=[StreamRecord(f"e0.{i}", "s", "a")]), now)
    spinner.start()
    await asyncio.sleep(0.01)
    res = {}
    for what in ("commit1", "commit256", "read1000"):
        ts, ws = [], []
        for n in range(60):
            key = f"e0.{n % 8 + 1}"
            t0 = spinner.turns
            w0 = time.perf_counter()
            if what == "commit1":
                await store.commit(Batch(appends={key: [Entry(n + 1, b'{"n":1}', 0)]}), now)
            elif what == "commit256":
                base = 1000 + n * 256
                await store.commit(
                    Batch(
                        appends={
                            "e0.9": [Entry(s, b"x" * 200, 0) for s in range(base, base + 256)]
                        },
                        streams=[StreamRecord("e0.9", "s", "a")] if n == 0 else [],
                    ),
                    now,
                )
            else:
                await store.read("e0.9", 1000, now, 1000)
            ts.append(spinner.turns - t0)
            ws.append((time.perf_counter() - w0) * 1000)
        res[what] = (statistics.median(ts), statistics.median(ws))
    await spinner.stop()
    await store.close()
    # CPU per commit without the spinner
    store = RedisStore(URL, "t" + secrets.token_hex(4), StoreLimits())
    await store.open()
    await store.commit(Batch(streams=[StreamRecord("e0.1", "s", "a")]), now)
    c0 = time.process_time()
    w0 = time.perf_counter()
    N = 2000
    for n in range(N):
        await store.commit(Batch(appends={"e0.1": [Entry(n + 1, b'{"n":1}', 0)]}), now)
    cpu = (time.process_time() - c0) / N * 1e6
    wall = (time.perf_counter() - w0) / N * 1e6
    await store.close()
    print(
        {k: "turns {:g}, {:.2f} ms".format(*v) for k, v in res.items()},
        f"idle commit: cpu {cpu:.0f} us, wall {wall:.0f} us",
    )


asyncio.run(main())
