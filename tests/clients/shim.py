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
from mcp import StdioServerParameters

from tests.clients.driver_io import parse_args
from tests.clients.py_sdk import call_and_report


async def main() -> int:
    args = parse_args(__doc__.splitlines()[0])
    shim = StdioServerParameters(
        command=sys.executable,
        args=["-m", "proxy", "connect", args.url],
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return await call_and_report(shim, args)


if __name__ == "__main__":
    sys.exit(anyio.run(main))
