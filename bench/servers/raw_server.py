"""A minimal legacy stdio MCP server for the benchmark: standard library only, pre-encoded lines.

Tools:

- ``echo(text)`` returns ``text``.
- ``flood(n=1000, size=200)`` writes ``n`` ``notifications/progress`` lines of about ``size``
  bytes each (to the caller's ``progressToken``) as fast as the pipe takes them, then its result.

It answers ``initialize``, ``tools/list``, ``tools/call`` and ``ping``; everything else gets an
empty result and notifications are ignored. It exists to measure the proxy, not the server: its
own cost per message is a few string operations.
"""

from __future__ import annotations

import json
import sys
from typing import Any

TOOLS: list[dict[str, Any]] = [
    {
        "name": "echo",
        "description": "Returns its text.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
    {
        "name": "flood",
        "description": "Writes `n` progress notifications of about `size` bytes, then returns.",
        "inputSchema": {
            "type": "object",
            "properties": {"n": {"type": "integer"}, "size": {"type": "integer"}},
        },
    },
]


def _text(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


def _flood(out: Any, token: Any, n: int, size: int) -> None:
    head = (
        b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":'
        + json.dumps(token).encode()
        + b',"progress":'
    )
    tail_skeleton = b',"total":%d,"message":""}}' % n
    pad = b"x" * max(0, size - len(head) - len(str(n)) - len(tail_skeleton))
    tail = b',"total":%d,"message":"%s"}}\n' % (n, pad)
    for i in range(1, n + 1):
        out.write(head + str(i).encode() + tail)


def _call(out: Any, params: dict[str, Any]) -> dict[str, Any]:
    name = params.get("name")
    args = params.get("arguments") or {}
    if name == "echo":
        return _text(str(args.get("text", "")))
    if name == "flood":
        n, size = int(args.get("n", 1000)), int(args.get("size", 200))
        token = (params.get("_meta") or {}).get("progressToken")
        if token is not None:
            _flood(out, token, n, size)
        return _text(f"flood {n}")
    return {"content": [{"type": "text", "text": f"unknown tool {name}"}], "isError": True}


def main() -> None:
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        msg = json.loads(line)
        if "id" not in msg or "method" not in msg:
            continue
        rid, method, params = msg["id"], msg["method"], msg.get("params") or {}
        result: dict[str, Any]
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "bench-raw", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": TOOLS}
        elif method == "tools/call":
            result = _call(out, params)
        else:
            result = {}
        out.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode() + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
