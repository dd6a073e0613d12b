"""A small legacy stdio MCP server for the quick start, using only the standard library.

It knows nothing of resumability: newline-delimited JSON-RPC on stdin/stdout, protocol
revisions up to 2025-11-25. Tools:

- ``echo {text}``: returns the text.
- ``countdown {steps, delay}``: one ``notifications/progress`` per step (when the call
  carries a progressToken), then "liftoff after N steps". Long enough to drop the
  connection mid-call and watch the proxy resume it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

# proxy.core is standard library only (it is sans-I/O), so the demo stays dependency-free.
from proxy.core.errors import error_message
from proxy.core.protocol import INVALID_PARAMS, METHOD_NOT_FOUND, PARSE_ERROR

VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")

TOOLS = [
    {
        "name": "echo",
        "description": "Return the text you send.",
        "inputSchema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    },
    {
        "name": "countdown",
        "description": "Count down with a progress notification per step, then return.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "steps": {"type": "integer", "minimum": 1, "maximum": 10000},
                "delay": {"type": "number", "minimum": 0, "maximum": 60},
            },
        },
    },
]

_write_lock = threading.Lock()


def send(obj: dict[str, Any]) -> None:
    line = json.dumps(obj, separators=(",", ":")) + "\n"
    with _write_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def result(rid: Any, value: dict[str, Any]) -> None:
    send({"jsonrpc": "2.0", "id": rid, "result": value})


def error(rid: Any, code: int, message: str) -> None:
    send(error_message(rid, code, message))


def text(value: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": False}


def countdown(rid: Any, args: dict[str, Any], token: Any) -> None:
    steps = int(args.get("steps", 10))
    delay = float(args.get("delay", 0.5))
    for i in range(1, steps + 1):
        time.sleep(delay)
        if token is not None:
            send(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/progress",
                    "params": {
                        "progressToken": token,
                        "progress": i,
                        "total": steps,
                        "message": f"{steps - i} to go",
                    },
                }
            )
    result(rid, text(f"liftoff after {steps} steps"))


def handle(msg: dict[str, Any]) -> None:
    method, rid = msg.get("method"), msg.get("id")
    params = msg.get("params") or {}
    if rid is None or method is None:
        return  # notifications and responses: nothing to do
    if method == "initialize":
        asked = params.get("protocolVersion")
        result(
            rid,
            {
                "protocolVersion": asked if asked in VERSIONS else VERSIONS[-1],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "mcp-resume-proxy-demo", "version": "1.0.0"},
            },
        )
    elif method == "ping":
        result(rid, {})
    elif method == "tools/list":
        result(rid, {"tools": TOOLS})
    elif method == "tools/call":
        name, args = params.get("name"), params.get("arguments") or {}
        token = (params.get("_meta") or {}).get("progressToken")
        if name == "echo":
            result(rid, text(str(args.get("text", ""))))
        elif name == "countdown":
            threading.Thread(target=countdown, args=(rid, args, token), daemon=True).start()
        else:
            error(rid, INVALID_PARAMS, f"Unknown tool: {name}")
    else:
        error(rid, METHOD_NOT_FOUND, f"Method not found: {method}")


def main() -> int:
    print("demo server ready", file=sys.stderr, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            error(None, PARSE_ERROR, "Parse error")
            continue
        if isinstance(msg, dict):
            handle(msg)
    return 0
