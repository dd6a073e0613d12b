"""Reading a stdio server's stdout and stderr (DESIGN.md U1), a part of
:class:`~proxy.upstream.stdio.StdioUpstream`.

Stdout is read in whole reads of up to :data:`READ_BYTES`, each cut into lines by a
:class:`~proxy.upstream.overlong.LineSplitter` (issue 23: one ``read`` and one split per
pipe's worth, not one ``readuntil`` and one ``Event.wait`` per line). Each line is one
message or a batch; a line that is not JSON-RPC is logged and skipped; an over-long line
is answered (:meth:`StdoutReader._overlong`). The reader hands over at most
:data:`LINES_PER_TURN` lines before it lets the event loop turn.

Backpressure (``overflow: block``): while paused, no line is handed over and nothing more
is read; the lines of the last read wait (one read's worth at most), the pipe's reader
buffers up to twice ``upstream.max_line_bytes`` and then stops reading, and the server
blocks on a full pipe. Nothing is lost.
"""

from __future__ import annotations

import asyncio

import structlog

from proxy.core import jsonrpc
from proxy.core.errors import LostReason, ProxyError, error_message
from proxy.core.handshake import HandshakeStep
from proxy.core.jsonrpc import Kind, Message
from proxy.core.protocol import SERVER_ERROR
from proxy.upstream.base import UpstreamContext, messages_of
from proxy.upstream.overlong import LineSplitter, OverlongLine, outline

log = structlog.get_logger("proxy.upstream.stdio")

LINES_PER_TURN = 64
"""Lines read from a server's stdout before the reader lets the event loop turn."""
READ_BYTES = 256 * 1024
"""The most taken from the pipe's reader at once (asyncio reads a pipe 256 KiB at a time)."""


class StdoutReader:
    """The stdout and stderr readers of :class:`StdioUpstream` (which sets up these
    attributes and implements ``send``)."""

    _context: UpstreamContext
    _proc: asyncio.subprocess.Process | None
    _readable: asyncio.Event  # cleared: paused (overflow: block)
    _reinit: tuple[str, asyncio.Future[Message]] | None

    def send(self, payload: bytes, handshake: HandshakeStep | None = None) -> None:
        raise NotImplementedError

    async def _read_stdout(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        readable = self._readable
        on_message = self._context.on_message
        splitter = LineSplitter(self._context.config.max_line_bytes)
        handed = 0
        while True:
            if not readable.is_set():
                await readable.wait()
            data = await stdout.read(READ_BYTES)
            for line in splitter.feed(data) if data else splitter.end():
                if not readable.is_set():
                    await readable.wait()
                handed += 1
                if handed == LINES_PER_TURN:
                    # A pipe full of lines is read without ever suspending: let the loop
                    # turn, so that other sessions, the store's commits and the writers
                    # get on.
                    handed = 0
                    await asyncio.sleep(0)
                if type(line) is OverlongLine:
                    self._overlong(line)
                    continue
                assert isinstance(line, bytes)
                line = line.strip()
                if not line:
                    continue
                for msg in messages_of(line, self._skipped):
                    reinit = self._reinit
                    if reinit is not None and msg.kind is Kind.RESPONSE and msg.id == reinit[0]:
                        if not reinit[1].done():
                            reinit[1].set_result(msg)
                        continue
                    on_message(msg, None)
            if not data:
                return

    def _overlong(self, line: OverlongLine) -> None:
        """Answer an over-long line's sender so that nobody waits forever.

        A response: its request (ours) gets an error naming the limit. A request from the
        server: the server gets an error response for it, on stdin. Ids are never mixed:
        each answer goes back to whoever sent the message. A notification is only logged.
        """
        limit = self._context.config.max_line_bytes
        shape = outline(line.head, line.tail)
        log.warning(
            "upstream_message_too_large",
            session=self._context.label,
            size=line.size,
            limit=limit,
            kind=shape.kind,
            answered=shape.id is not None and shape.kind in ("response", "request"),
        )
        if shape.id is None:
            return
        data = {"reason": LostReason.UPSTREAM_MESSAGE_TOO_LARGE.value, "limit": limit}
        if shape.kind == "response":
            message = f"the MCP server's response is over upstream.max_line_bytes ({limit} bytes)"
            error = error_message(shape.id, SERVER_ERROR, message, data)
            self._context.on_message(jsonrpc.classify(error), None)
        elif shape.kind == "request":
            message = f"the request is over the proxy's upstream.max_line_bytes ({limit} bytes)"
            error = error_message(shape.id, SERVER_ERROR, message, data)
            self.send(jsonrpc.encode(error))

    def _skipped(self, line: bytes | str, exc: ProxyError) -> None:
        log.warning(
            "upstream_line_skipped",
            session=self._context.label,
            error=exc.message,
            line=line[:200] if isinstance(line, str) else line[:200].decode(errors="replace"),
        )

    async def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        stderr = self._proc.stderr
        while True:
            try:
                line = await stderr.readline()
            except ValueError:
                continue
            if not line:
                return
            log.info(
                "upstream_stderr",
                session=self._context.label,
                line=line.rstrip().decode(errors="replace"),
            )
