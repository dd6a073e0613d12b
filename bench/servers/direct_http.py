"""Serve the legacy fixture (``tests/fixtures/legacy_server.py``) over Streamable HTTP with the SDK.

``python bench/servers/direct_http.py --port PORT`` serves the fixture's own low-level server
(its ``build_server()``: tools echo, slow, burst, ...) at ``http://127.0.0.1:PORT/mcp`` with the
SDK's transport: the "direct" contender, i.e. what the proxy is compared against. No event store,
so no resumability (the benchmark's replay phase is skipped for it). SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import importlib.util
import signal
from pathlib import Path
from types import ModuleType

import uvicorn

FIXTURE: Path = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "legacy_server.py"


def load_fixture() -> ModuleType:
    """Import the fixture by path: ``tests/fixtures`` is a folder of scripts, not a package."""
    spec = importlib.util.spec_from_file_location("legacy_fixture_server", FIXTURE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {FIXTURE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = load_fixture().build_server()
    app = server.streamable_http_app(host=args.host, session_idle_timeout=None)
    # uvicorn re-raises SIGTERM after its graceful shutdown; a no-op handler makes it exit 0.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
