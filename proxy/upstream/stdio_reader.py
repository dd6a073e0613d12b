"""Reading a stdio server's stdout and stderr (DESIGN.md U1), a part of
:class:`~proxy.upstream.stdio.StdioUpstream`.

Stdout is handled in the pipe's own callbacks (:class:`StdoutLines`, issue 23): each read
is cut into lines by a :class:`~proxy.upstream.overlong.LineSplitter` and the lines are
handed over at once, at most :data:`LINES_PER_TURN` in one callback; the rest go in the
next turns of the event loop (``call_soon``), the pipe not read meanwhile. No reader task,
no ``StreamReader``: no ``readuntil``, no task wake-up per read, and a server's answer is
handed over in the turn that reads it. Each line is one message or a batch; a line that is
not JSON-RPC is logged and skipped; an over-long line is answered
(:meth:`StdoutReader._overlong`). Given ``context.on_messages`` (the runtime gives it), the
messages of one turn's lines go to the session together, in one call (one core event and
one flush to each client connection for up to :data:`LINES_PER_TURN` lines, issue 23).

Backpressure (``overflow: block``): while paused, no line is handed over and the pipe is
not read; what is held is the rest of one read (at most the 256 KiB asyncio reads at once)
and the line under way (within ``upstream.max_line_bytes``, then only its two ends); the
server blocks on a full pipe. Nothing is lost. A pause that a turn's messages cause takes
effect after them: a held-back stream takes at most one turn's lines past its bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

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
"""Lines of a server's stdout handed over before the event loop turns."""

Line = bytes | OverlongLine


class StdoutLines(asyncio.Protocol):
    """One process's stdout, handed over line by line from the pipe's callbacks: the
    protocol of the pipe's own read transport (``loop.connect_read_pipe``), so that each
    read is cut and handed over in the callback that read it.

    The pipe is read while nothing is left over from the last read and nobody paused it:
    a read whose lines are more than a turn's holds the reading until they are all handed
    over. :attr:`done` is set once the pipe ended and every line was handed over (or
    :meth:`close` was called)."""

    def __init__(
        self,
        limit: int,
        on_line: Callable[[Line], None],
        loop: asyncio.AbstractEventLoop,
        paused: bool = False,
        on_turn: Callable[[], None] | None = None,
    ) -> None:
        self._splitter = LineSplitter(limit)
        self._on_line = on_line
        self._on_turn = on_turn  # after each turn's lines (not once closed)
        self._loop = loop
        self._lines: list[Line] = []  # of the last read, from _at on not handed over yet
        self._at = 0
        self._paused = paused  # by the upstream (overflow: block)
        self._scheduled = False  # a call_soon of _hand is pending
        self._ended = False  # the pipe is closed
        self._closed = False
        self._pipe: asyncio.ReadTransport | None = None
        self.done: asyncio.Future[None] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.ReadTransport)
        self._pipe = transport
        if self._paused:
            transport.pause_reading()

    def data_received(self, data: bytes) -> None:
        """A read of the pipe."""
        lines = self._splitter.feed(data)
        if self._at < len(self._lines):  # (not expected: reading stops while lines wait)
            lines = self._lines[self._at :] + lines
        self._lines, self._at = lines, 0
        self._hand()

    def connection_lost(self, exc: Exception | None) -> None:
        """The pipe closed (the server exited, or closed its stdout; or it was let go)."""
        self._pipe = None
        self._ended = True
        end = self._splitter.end()
        if end:
            self._lines, self._at = self._lines[self._at :] + end, 0
        self._hand()

    def pause(self) -> None:
        """Hand over no more lines and stop reading the pipe until :meth:`resume`."""
        self._paused = True
        if self._pipe is not None:
            self._pipe.pause_reading()

    def resume(self) -> None:
        self._paused = False
        if self._at < len(self._lines) or self._ended:
            self._schedule()
        elif self._pipe is not None:
            self._pipe.resume_reading()

    def close(self) -> None:
        """Hand over nothing more (the process is being let go)."""
        self._closed = True
        self._lines, self._at = [], 0
        if not self.done.done():
            self.done.set_result(None)

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        self._scheduled = False
        self._hand()

    def _hand(self) -> None:
        """Hand over up to a turn's lines; the rest in the next turn, the pipe unread."""
        if self._closed or self._paused:
            return
        lines = self._lines
        end = min(len(lines), self._at + LINES_PER_TURN)
        on_line = self._on_line
        while self._at < end:
            line = lines[self._at]
            self._at += 1
            on_line(line)
            if self._paused or self._closed:
                break
        if self._on_turn is not None and not self._closed:
            self._on_turn()
        if self._paused or self._closed:
            return  # (pause stopped the reading; resume schedules the rest)
        if self._at < len(lines):
            if self._pipe is not None:
                self._pipe.pause_reading()
            self._schedule()
            return
        self._lines, self._at = [], 0
        if self._ended:
            if not self.done.done():
                self.done.set_result(None)
        elif self._pipe is not None:
            self._pipe.resume_reading()


class StdoutReader:
    """The stdout and stderr readers of :class:`StdioUpstream` (which sets up these
    attributes and implements ``send``)."""

    _context: UpstreamContext
    _proc: asyncio.subprocess.Process | None
    _reinit: tuple[str, asyncio.Future[Message]] | None
    # With ``context.on_messages``: the messages of this turn's lines so far, handed over
    # together by :meth:`_stdout_turn` (None: each goes to ``on_message`` at once).
    _batch: list[Message] | None = None
    _paused: bool

    def send(self, payload: bytes, handshake: HandshakeStep | None = None) -> None:
        raise NotImplementedError

    def _new_stdout(self, limit: int) -> StdoutLines:
        """The stdout of a process about to start (paused if the upstream is)."""
        self._batch = [] if self._context.on_messages is not None else None
        loop = asyncio.get_running_loop()
        return StdoutLines(limit, self._stdout_line, loop, self._paused, self._stdout_turn)

    def _stdout_line(self, line: Line) -> None:
        """One line of the server's stdout: its messages go to the session (the answer
        to the proxy's own re-initialize is kept here)."""
        if isinstance(line, OverlongLine):
            self._overlong(line)
            return
        line = line.strip()
        if not line:
            return
        # One message a line, the common case, without messages_of's lists; a batch or
        # anything that is not a JSON object goes through it (decoded again: rare).
        try:
            obj = jsonrpc.decode(line)
        except ProxyError as exc:
            self._skipped(line, exc)
            return
        if type(obj) is not dict:
            for msg in messages_of(line, self._skipped):
                self._stdout_message(msg)
            return
        # Its own bytes are its wire form unless a CR or NUL is in them (jsonrpc.wire_of:
        # the line is stripped and holds no LF).
        wire = None if b"\r" in line or b"\x00" in line else line
        try:
            msg = jsonrpc.classify(obj, wire)
        except ProxyError as exc:
            self._skipped(line, exc)
            return
        batch = self._batch
        if batch is not None and self._reinit is None:
            batch.append(msg)
        else:
            self._stdout_message(msg)

    def _stdout_message(self, msg: Message) -> None:
        reinit = self._reinit
        if reinit is not None and msg.kind is Kind.RESPONSE and msg.id == reinit[0]:
            if not reinit[1].done():
                reinit[1].set_result(msg)
            return
        batch = self._batch
        if batch is None:
            self._context.on_message(msg, None)
        else:
            batch.append(msg)

    def _stdout_turn(self) -> None:
        """The end of a turn's lines: their messages go to the session at once (one
        event, one flush to each connection), a lone one as ever."""
        batch = self._batch
        if not batch:
            return
        self._batch = []
        if len(batch) == 1:
            self._context.on_message(batch[0], None)
            return
        on_messages = self._context.on_messages
        assert on_messages is not None  # (else there is no batch)
        on_messages(batch)

    def _overlong(self, line: OverlongLine) -> None:
        """Answer an over-long line's sender so that nobody waits forever.

        A response: its request (ours) gets an error naming the limit. A request from the
        server: the server gets an error response for it, on stdin. Ids are never mixed:
        each answer goes back to whoever sent the message. A notification is only logged.
        The messages of the lines before it are handed over first, in order.
        """
        self._stdout_turn()
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
