"""A Redis commit's cost in the proxy, in-process, without a server: ``N`` commits of
``PER`` events each go through the journal, the gathering (``journal_into``), the slices,
the split by bucket and the packing of the ``EVALSHA`` (issue 23, helper redis4).

``PYTHONPATH=DIR .venv/bin/python bench/redis_pack_cost.py N PER [j|g|all]``: ``j`` the
journal's appends alone, ``g`` with the gathering, ``all`` (the default) with the packing
too. Count it with callgrind (``valgrind --tool=callgrind``) at ``N`` and at 0 commits:
the difference over ``N * PER`` is the instructions per event, which no load moves.
"""

import sys
import time
from types import SimpleNamespace

from proxy.core.journal import Journal
from proxy.store.base import Batch, StoreLimits
from proxy.store.journal_batch import journal_into
from proxy.store.redis_layout import Layout, by_bucket
from proxy.store.redis_pack import pack_commit
from proxy.store.slices import slices

n, per = int(sys.argv[1]), int(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else "all"
session = SimpleNamespace(epoch="a1b2c3d4e5f6", session_id="s")
layout = Layout("bench")
limits = StoreLimits()
payload = b'{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"'
payload += b"x" * 120 + b'"}}'
seq = 1
t0 = time.process_time()
for _ in range(n):
    j = Journal()
    for _ in range(per):
        j.appends.append((1, seq, payload, 0))
        seq += 1
    if mode == "j":
        continue
    batch = Batch()
    journal_into(batch, session, j.take(), "srv", "owner", 60.0)  # type: ignore[arg-type]
    if mode == "g":
        continue
    for part in slices(batch):
        for bucket, one in by_bucket(part.batch).items():
            pack_commit("0" * 40, layout, bucket, one, 1e9, limits)
if n:
    print(f"{(time.process_time() - t0) / (n * per) * 1e6:.3f} µs of CPU per event")
