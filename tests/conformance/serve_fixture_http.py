"""Serve ``tests/fixtures/conformance_server.py`` over Streamable HTTP with the ``mcp`` SDK.

``python tests/conformance/serve_fixture_http.py --port PORT`` serves it at
``http://127.0.0.1:PORT/mcp`` (the SDK's own transport, DNS-rebinding protection on, no
event store). It is the reference target of the conformance test: what the suite says about
the fixture without the proxy in between.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType

import uvicorn

FIXTURE: Path = Path(__file__).resolve().parents[1] / "fixtures" / "conformance_server.py"


def load_fixture() -> ModuleType:
    """Import the fixture by path: ``tests/fixtures`` is a folder of scripts, not a package."""
    spec = importlib.util.spec_from_file_location("conformance_fixture_server", FIXTURE)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {FIXTURE}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = load_fixture().build_server()
    app = server.streamable_http_app(host=args.host)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
