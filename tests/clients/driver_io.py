"""What the client drivers in this folder share: one command line and one output.

Every driver is run as ``python -m tests.clients.<driver> URL TOOL ARGS_JSON [--era ERA]
[--timeout SECONDS]``
(``node tests/clients/ts.mjs ...`` for the TypeScript SDKs) and prints one JSON object per
line on stdout, in the order the client's own API handed things over:

- ``{"progress": P}`` for each ``notifications/progress`` of the call;
- ``{"result": TEXT, "bytes": N}`` once the call returned (the text cut to 80 characters);
- ``{"error": "Type: message"}`` when the call (or the connection) failed; exit status 1.

``--era`` is ``legacy`` (the ``initialize`` handshake, 2025-11-25), ``modern`` (pinned at
2026-07-28) or ``auto`` (what the client does by itself). Each driver uses its client's
default settings: the matrix measures what a user of that client gets.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

ERAS = ("legacy", "modern", "auto")
# A cut call takes a few seconds: a client that hangs on a broken stream fails at this
# timeout, shorter than the clients' own 60 s (the one setting changed; --timeout).
CALL_TIMEOUT_S = 30.0


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def emit_result(text: str) -> None:
    emit({"result": text[:80], "bytes": len(text)})


def describe(exc: BaseException) -> str:
    """``Type: message``; an exception group (anyio task groups) by its first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("url")
    parser.add_argument("tool")
    parser.add_argument("args", type=json.loads, help="the tool's arguments, as a JSON object")
    parser.add_argument("--era", choices=ERAS, default="auto")
    parser.add_argument("--timeout", type=float, default=CALL_TIMEOUT_S, help="seconds")
    return parser.parse_args()
