"""``mcp-resume-proxy connect URL``: a stdio MCP server that carries a host's session to
the proxy at URL and hides every drop of the connection from the host (DESIGN.md D5).

A desktop host that can only launch stdio servers launches the shim. The shim reads
newline-delimited JSON-RPC on stdin, POSTs each message to the proxy over Streamable HTTP
(MCP 2025-11-25 basic/transports), and writes what comes back to stdout, one message a
line; its logs go to stderr. Rules:

- **Drops.** A request's SSE stream, or the session's standalone GET stream, that ends
  before its end (connection reset, EOF, the proxy closing it after ``retry:``) is resumed
  with ``GET`` + ``Last-Event-ID`` of the last event received on that stream, after the
  stream's ``retry`` (a server-initiated close) or a backoff step. The proxy replays from
  that event on, so the host sees every message once, in order. Reconnecting gives up
  after ``--reconnect-max-seconds``; the request then gets an error (``connection_lost``).
- **Sending.** A POST whose connection could not be made (refused, or not made within
  ``--connect-timeout-seconds``) never reached the proxy: it is retried with backoff for
  up to the same budget (then ``proxy_unreachable``). The host's own ``initialize`` is
  retried for ``--connect-timeout-seconds`` in all, so that a host whose proxy is down
  hears it before its own timeout; the shim keeps serving (a later ``initialize`` starts
  the session). A POST that failed after the connection was made (reset, EOF, before
  the stream's first event id), or that a balancer answered with its own 502 or 504 (no
  JSON-RPC body: the replica it chose broke off or did not answer after the request
  reached it), may have been received: a request is answered with an error whose
  ``data.reason`` is ``outcome_unknown`` and is never sent again (it could run twice); a
  response is sent again (the proxy drops an answer that matches no open request); a
  notification is logged as possibly lost. Every POST uses a new connection, so this is
  exact. A message refused with 503 before it ran (``proxy_draining``,
  ``store_unavailable``, a balancer's own 503 without a JSON-RPC body) is sent again
  (a request after its ``Retry-After``, at most 5 s), within the same budget
  (:func:`proxy.shim.http.retry_after_refusal`).
- **Session gone** (404, 2025-11-25 §Session Management item 3): every request the proxy
  had taken gets error -32001 "session expired at the proxy" (``data.reason:
  session_expired``). The next request from the host first starts a new session by
  replaying the host's original ``initialize`` (its answer is kept by the shim) and
  ``notifications/initialized``; a request the proxy refused with 404, or had not taken
  yet (its POST still retried, as after a proxy restart), is sent in the new session: it
  never ran.
- **Ending.** On stdin EOF, SIGTERM or SIGINT: stop every stream, ``DELETE`` the session
  (2 s at most), exit 0.

Host input that is not JSON gets -32700, a message that is not JSON-RPC gets -32600 (with
its id when it has one); a batch is sent as separate messages.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from yarl import URL

from proxy.config_rules import ConfigError, shown_url
from proxy.config_strings import check_header
from proxy.core import jsonrpc
from proxy.core.errors import ProxyError, error_message
from proxy.core.jsonrpc import Kind, Message
from proxy.core.protocol import INTERNAL_ERROR, INVALID_REQUEST, PARSE_ERROR
from proxy.logs import configure_logging
from proxy.shim.http import ProxyLink
from proxy.shim.session import ShimSession
from proxy.shim.stdio import MAX_LINE_BYTES, HostPipe

log = structlog.get_logger("proxy.shim")

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

DESCRIPTION = """\
A stdio MCP server for hosts that can only launch stdio servers (desktop apps): it
forwards everything to the mcp-resume-proxy at URL over Streamable HTTP and writes what
comes back to stdout. When the connection drops it reconnects and resumes with
Last-Event-ID by itself: the host sees no lost and no repeated message, and requests in
flight complete. If the proxy's session is gone (404, e.g. after a proxy restart),
requests the proxy had taken get an error ("session expired at the proxy") and the next
request starts a new session, replaying the host's initialize. If the proxy cannot be
reached when the host starts, its initialize gets an error (proxy_unreachable) after
--connect-timeout-seconds and the shim keeps serving. Logs go to stderr.
"""

EPILOG = """\
host configuration (e.g. Claude Desktop's mcpServers):
  {"command": "mcp-resume-proxy",
   "args": ["connect", "http://127.0.0.1:8808/mcp", "--header", "Authorization: Bearer ${TOKEN}"]}

A request whose POST broke after the proxy may have received it is answered with an error
(data.reason "outcome_unknown") instead of being sent twice. stdin EOF or SIGTERM: the
proxy session is deleted and the shim exits 0.
"""


@dataclass(frozen=True)
class ShimOptions:
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    reconnect_max_seconds: float = 30.0
    connect_timeout_seconds: float = 5.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mcp-resume-proxy connect",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("url", metavar="URL", help="the proxy's MCP endpoint (http(s)://…/mcp)")
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="a header for every request to the proxy, e.g. auth (repeatable; ${VAR} expands)",
    )
    parser.add_argument(
        "--reconnect-max-seconds",
        type=float,
        default=30.0,
        metavar="S",
        help="give up reconnecting a session that was up after this long (default 30)",
    )
    parser.add_argument(
        "--connect-timeout-seconds",
        type=float,
        default=5.0,
        metavar="S",
        help="the longest wait for a connection to the proxy, and for the host's initialize "
        "when the proxy cannot be reached (then an error: proxy_unreachable; default 5)",
    )
    parser.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="info",
        help="stderr log level (default info)",
    )
    parser.add_argument(
        "--log-format", choices=("console", "json"), default="console", help="default console"
    )
    return parser


def parse_headers(values: Sequence[str]) -> dict[str, str]:
    """``'Name: value'`` strings to a dict, ``${VAR}`` replaced from the environment;
    ``ValueError`` for one that cannot be sent, never quoting it (this goes to the host's
    log, and a header is most often a credential: ``Bearer abc…`` without its name)."""
    headers: dict[str, str] = {}
    for header in values:
        name, sep, value = header.partition(":")
        if not sep or not name.strip():
            raise ValueError("--header: expected 'NAME: VALUE' (a name, a colon, a value)")
        try:
            expanded = _ENV_REF.sub(lambda m: os.environ[m.group(1)], value.strip())
        except KeyError as exc:
            raise ValueError(
                f"--header {name.strip()}: environment variable {exc.args[0]} is not set"
            ) from None
        try:
            check_header(name.strip(), expanded, "--header")
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        headers[name.strip()] = expanded
    return headers


class Shim:
    """Owns the host pipe, the HTTP link and every task; :meth:`run` returns the exit code."""

    def __init__(self, options: ShimOptions, pipe: HostPipe | None = None) -> None:
        self.options = options
        self.pipe = pipe or HostPipe()
        self.link = ProxyLink(
            options.url, options.headers, connect_timeout=options.connect_timeout_seconds
        )
        self.session = ShimSession(
            self.pipe,
            self.link,
            reconnect_max_seconds=options.reconnect_max_seconds,
            connect_timeout_seconds=options.connect_timeout_seconds,
        )
        # Bounded: a host that writes faster than the proxy takes is held back on stdin.
        self._outbox: asyncio.Queue[Message] = asyncio.Queue(maxsize=256)
        self._stop = asyncio.Event()
        self._why = "stdin closed"

    def _signalled(self, name: str) -> None:
        self._why = name
        self._stop.set()

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        await self.pipe.open()
        await self.link.open()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._signalled, sig.name)
        log.info("shim_started", url=_loggable(self.options.url))
        reader = asyncio.create_task(self._read_host(), name="stdin")
        sender = asyncio.create_task(self._send_all(), name="sender")
        try:
            await self._stop.wait()
        finally:
            log.info("shim_stopping", why=self._why)
            for task in (reader, sender):
                task.cancel()
            await asyncio.gather(reader, sender, return_exceptions=True)
            await self.session.end_session()
            await self.link.close()
            await self.pipe.close()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            log.info("shim_stopped")
        return 0

    async def _read_host(self) -> None:
        """Parse host lines into the outbox; answer garbage at once (-32700 / -32600)."""
        try:
            async for line in self.pipe.lines():
                if line is None:
                    self._refuse(None, INVALID_REQUEST, f"message over {MAX_LINE_BYTES} bytes")
                    continue
                for msg in self._parse(line):
                    await self._outbox.put(msg)
        finally:
            self._stop.set()

    def _parse(self, line: bytes) -> list[Message]:
        try:
            decoded = jsonrpc.decode(line)
        except ProxyError as exc:
            self._refuse(None, PARSE_ERROR, exc.message)
            return []
        if isinstance(decoded, list) and not decoded:
            self._refuse(None, INVALID_REQUEST, "Invalid Request: empty batch")
            return []
        out: list[Message] = []
        for item in decoded if isinstance(decoded, list) else [decoded]:
            try:
                out.append(jsonrpc.classify(item))
            except ProxyError as exc:
                self._refuse(exc.request_id, exc.jsonrpc_code, exc.message)
        return out

    def _refuse(self, request_id: Any, code: int, message: str) -> None:
        log.warning("host_message_refused", code=code, error=message)
        data = {"reason": "parse_error" if code == PARSE_ERROR else "invalid_message"}
        self.pipe.write(jsonrpc.encode(error_message(request_id, code, message, data)))

    async def _send_all(self) -> None:
        """Deliver host messages to the proxy one at a time, in order."""
        while True:
            msg = await self._outbox.get()
            try:
                await self.session.deliver(msg)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug must not take the host's session down
                log.exception("deliver_failed", method=msg.method)
                if msg.kind is Kind.REQUEST:
                    self._refuse(msg.id, INTERNAL_ERROR, f"mcp-resume-proxy connect: {exc}")
            await self.pipe.drain()


def _loggable(url: str) -> str:
    """The URL without user info or query (either may carry a credential)."""
    parsed = URL(url)
    return str(parsed.with_user(None).with_query(None).with_fragment(None))


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        headers = parse_headers(args.header)
    except ValueError as exc:
        print(f"mcp-resume-proxy connect: {exc}", file=sys.stderr)
        return 2
    if not re.match(r"^https?://", args.url, re.IGNORECASE):
        print(
            f"mcp-resume-proxy connect: URL must be http(s)://, got {shown_url(args.url)!r}",
            file=sys.stderr,
        )
        return 2
    for flag, value in (
        ("--reconnect-max-seconds", args.reconnect_max_seconds),
        ("--connect-timeout-seconds", args.connect_timeout_seconds),
    ):
        if not value > 0:
            print(f"mcp-resume-proxy connect: {flag} must be > 0", file=sys.stderr)
            return 2
    configure_logging(args.log_format, args.log_level)
    options = ShimOptions(
        url=args.url,
        headers=headers,
        reconnect_max_seconds=args.reconnect_max_seconds,
        connect_timeout_seconds=args.connect_timeout_seconds,
    )
    with contextlib.suppress(KeyboardInterrupt):
        return asyncio.run(Shim(options).run())
    return 0
