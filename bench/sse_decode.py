"""SSEDecoder.feed on its own, for callgrind (bench/README.md, issue 23 fourth pass): N
events of a notification decoded REPS times from 64 KiB chunks; run once with REPS 0 to
subtract the start-up and the encoding.

    PYTHONHASHSEED=0 valgrind --tool=callgrind python bench/sse_decode.py SRC N REPS

SRC: a directory holding a proxy/ (a worktree, or a copy of another commit's).
"""

from __future__ import annotations

import importlib
import sys

CHUNK = 64 * 1024


def main() -> None:
    src, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    sys.path.insert(0, src)
    sse = importlib.import_module("proxy.core.sse")
    note = '{"jsonrpc":"2.0","method":"notifications/message","params":{"n":%d}}'
    wire = b"".join(sse.encode_event((note % i).encode(), event_id=f"e.1.{i}") for i in range(n))
    chunks = [wire[i : i + CHUNK] for i in range(0, len(wire), CHUNK)]
    for _ in range(reps):
        decoder = sse.SSEDecoder()
        got = sum(len(decoder.feed(chunk)) for chunk in chunks)
        assert got == n, got


if __name__ == "__main__":
    main()
