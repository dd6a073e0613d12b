"""Client driver: the MCP Inspector 2.12 CLI (``.tools/inspector``, scripts/install-inspector.sh)
over Streamable HTTP, with its default settings (driver_io.py).

It runs, as the Inspector's README says, ``mcp-inspector --cli URL --method tools/call
--tool-name TOOL`` with the arguments as ``--tool-args-json``, ``--protocol-era`` for the era
(``legacy`` is the CLI's default for a URL; ``modern`` advertises the Tasks extension by
default), ``--format json``, and ``--tool-metadata progressToken=1`` so that the server sends
progress (the CLI shows none: the output is only the result). Its one JSON object (or its
error on stderr and a non-zero exit) becomes driver_io's lines.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.clients.driver_io import emit, emit_result, parse_args

INSPECTOR = Path(__file__).resolve().parents[2] / ".tools/inspector/node_modules/.bin/mcp-inspector"
# Secrets (none here) in memory: no keyring, no file in the home directory.
ENV = {**os.environ, "MCP_INSPECTOR_SECRET_STORE": "memory"}


def main() -> int:
    args = parse_args(__doc__.splitlines()[0])
    argv = [str(INSPECTOR), "--cli", args.url, "--method", "tools/call",
            "--tool-name", args.tool, "--tool-args-json", json.dumps(args.args),
            "--tool-metadata", "progressToken=1", "--format", "json"]  # fmt: skip
    if args.era != "auto":
        argv += ["--protocol-era", args.era]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=args.timeout, check=False, env=ENV)
    except subprocess.TimeoutExpired:
        emit({"error": f"TimeoutExpired: no answer in {args.timeout}s"})
        return 1
    sys.stderr.buffer.write(done.stderr)
    try:
        result = json.loads(done.stdout)["result"]
    except (ValueError, KeyError, TypeError):
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["(nothing)"])[-1]
        emit({"error": f"exit {done.returncode}: {last[:300]}"})
        return 1
    if result.get("isError"):
        emit({"error": f"tool error: {json.dumps(result)[:200]}"})
        return 1
    emit_result("".join(block.get("text", "") for block in result.get("content", [])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
