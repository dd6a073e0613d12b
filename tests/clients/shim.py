"""Client driver: the ``mcp-resume-proxy connect`` shim, launched by the official Python
SDK's stdio client as a desktop host launches a stdio server (driver_io.py).

The shim speaks 2025-11-25 to the proxy whatever the host speaks; the host here uses the
``initialize`` handshake (``legacy``). The shim's stderr (its log) goes to this driver's
stderr. Progress is read by a message handler, in arrival order, as in ``py_sdk.py``.
"""

from __future__ import annotations

import os
import sys

import anyio
from mcp import Client, StdioServerParameters

from tests.clients.driver_io import describe, emit, emit_result, parse_args
from tests.clients.py_sdk import MODES, ignore_progress, on_message
from tests.e2e.sdk_client import text_of


async def main() -> int:
    args = parse_args(__doc__.splitlines()[0])
    shim = StdioServerParameters(
        command=sys.executable,
        args=["-m", "proxy", "connect", args.url],
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        with anyio.fail_after(args.timeout):
            async with Client(shim, mode=MODES[args.era], message_handler=on_message) as client:
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


if __name__ == "__main__":
    sys.exit(anyio.run(main))
