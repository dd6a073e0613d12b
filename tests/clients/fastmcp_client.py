"""Client driver: fastmcp 4.2 (``fastmcp.Client``) over Streamable HTTP (driver_io.py).

``Client(url, mode=...)`` with every other setting at its default: ``auto`` (fastmcp's
default) probes ``server/discover`` first, ``legacy`` is the ``initialize`` handshake,
``modern`` pins 2026-07-28. Progress comes from the call's ``progress_handler``.
"""

from __future__ import annotations

import sys

import anyio
from fastmcp import Client

from tests.clients.driver_io import describe, emit, emit_result, parse_args

MODES = {"legacy": "legacy", "modern": "2026-07-28", "auto": "auto"}


async def on_progress(progress: float, total: float | None, message: str | None) -> None:
    emit({"progress": progress})


async def main() -> int:
    args = parse_args(__doc__.splitlines()[0])
    try:
        with anyio.fail_after(args.timeout):
            async with Client(args.url, mode=MODES[args.era]) as client:
                result = await client.call_tool(
                    args.tool, args.args, progress_handler=on_progress, timeout=args.timeout
                )
    except Exception as exc:
        emit({"error": describe(exc)})
        return 1
    emit_result("".join(getattr(block, "text", "") for block in result.content))
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
