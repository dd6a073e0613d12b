"""FastMCP's proxy in front of a stdio server, served over Streamable HTTP: a bench peer.

``bench/.peers/fastmcp/bin/python bench/fastmcp_proxy.py --port P [--event-store] -- CMD...``

Runs in its own venv (``contenders.install_peers``: PyPI ``fastmcp``, pinned there), never
in the project's. What a FastMCP user writes to put a stdio server behind HTTP, as its docs
show it: ``create_proxy(StdioTransport(...))``, then ``http_app(event_store=...)`` served by
uvicorn on 127.0.0.1:P at ``/mcp``.

- without ``--event-store``: no event store (the SDK transport's default): events carry no
  id, nothing can be resumed;
- with ``--event-store``: FastMCP's own ``fastmcp.server.event_store.EventStore`` on its
  default in-memory backend, with ``max_events_per_stream`` raised from its default (100)
  to ``--max-events`` so that the bench's 10,000-notification replay and its 50,000-
  notification buffered phase fit (the same thing the bench does to npm mcp-proxy's cap).
"""

from __future__ import annotations

import argparse
import shlex

import uvicorn
from fastmcp.client.transports import StdioTransport
from fastmcp.server import create_proxy
from fastmcp.server.event_store import EventStore


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--event-store", action="store_true", help="FastMCP's EventStore")
    parser.add_argument("--max-events", type=int, default=1_000_000, help="per stream")
    parser.add_argument("command", nargs="+", help="the stdio server (after --)")
    args = parser.parse_args()
    command, *rest = args.command
    proxy = create_proxy(StdioTransport(command, rest), name=shlex.join(args.command))
    store = EventStore(max_events_per_stream=args.max_events) if args.event_store else None
    app = proxy.http_app(path="/mcp", event_store=store)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
