"""Client driver: the official Python SDK (``mcp`` 2.3) over Streamable HTTP (driver_io.py).

``Client(url, mode=...)`` with every other setting at its default: ``legacy`` is the
``initialize`` handshake, ``modern`` pins 2026-07-28, ``auto`` probes ``server/discover``.
Progress is read by a message handler (in arrival order; the SDK runs progress callbacks
as tasks), with a no-op progress callback so that the call carries a ``progressToken``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.session import IncomingMessage

from tests.clients.driver_io import describe, emit, emit_result, parse_args
from tests.e2e.sdk_client import text_of

MODES = {"legacy": "legacy", "modern": "2026-07-28", "auto": "auto"}


async def on_message(message: IncomingMessage) -> None:
    if isinstance(message, types.ProgressNotification):
        emit({"progress": message.params.progress})


async def ignore_progress(progress: float, total: float | None, message: str | None) -> None:
    """Only there so that the request asks for progress."""


async def call_and_report(target: Any, args: argparse.Namespace) -> int:
    """``Client(target)`` at ``args.era`` calls ``args.tool``; what it got, as JSON lines.
    ``target``: a URL, or the stdio server parameters of a process to launch (shim.py)."""
    try:
        with anyio.fail_after(args.timeout):
            async with Client(target, mode=MODES[args.era], message_handler=on_message) as client:
                result = await client.call_tool(
                    args.tool, args.args, progress_callback=ignore_progress
                )
    except Exception as exc:
        emit({"error": describe(exc)})
        return 1
    if result.is_error:
        emit({"error": f"tool error: {text_of(result)[:200]}"})
        return 1
    emit_result(text_of(result))
    return 0


async def main() -> int:
    args = parse_args(__doc__.splitlines()[0])
    return await call_and_report(args.url, args)


if __name__ == "__main__":
    sys.exit(anyio.run(main))
