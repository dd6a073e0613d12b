"""A TCP forwarder for tests that can cut connections: fault injection by wrapping the
transport (CONVENTIONS.md), never by patching the code under test.

``CutProxy(target_port)`` listens on a free 127.0.0.1 port and forwards every connection
to ``target_port``. The test can then:

- ``cut_all()``: drop every current connection at once;
- ``schedule_cuts(offsets)``: for each offset, drop the connection that carries that
  server→client byte right after it, also in the middle of an SSE event (offsets count
  the bytes forwarded on all connections since the call, or with ``after=marker`` since
  the first server→client read holding ``marker``; what a cut holds back is never
  forwarded, so every offset lands while bytes keep flowing);
- ``cut_before_reply()``: let the next POST through, then drop its connection before the
  first byte of the server's reply reaches the client (the server got it; the client
  cannot know);
- ``refuse()`` / ``accept()``: close and reopen the listening socket (connections are
  refused meanwhile, as when the server is briefly away).

A scheduled cut is a plain close (FIN): the client gets every byte before the offset and
then a broken response. ``cut_all`` resets (``SO_LINGER`` 0: RST, and the client loses
what it had not read yet) unless told ``reset=False``. The forwarder also notes the
``Mcp-Session-Id`` values it sees in responses (``session_ids``) and keeps every byte the
clients sent (``sent_to_server``).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

_CHUNK = 64 * 1024
_SESSION_ID = re.compile(rb"(?i)\r\nmcp-session-id: *([!-~]+)\r\n")


def abort(writer: asyncio.StreamWriter, *, reset: bool = True) -> None:
    """Close ``writer``'s connection now; ``reset``: with an RST (``SO_LINGER`` 0: the
    peer loses what it had not read yet), else a plain close."""
    sock = writer.get_extra_info("socket")
    if reset and sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    got_request: bool = False
    cut_on_reply: bool = False  # cut_before_reply() chose this connection
    tail: bytes = b""  # the last bytes seen from the server, for headers split in two


class CutProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.sent_to_server = bytearray()
        self.bytes_down = 0  # server -> client bytes forwarded since the last schedule
        self.cuts = 0  # connections cut so far
        self.connections = 0  # connections accepted so far
        self.session_ids: list[str] = []
        self._cuts_at: list[int] = []
        self._count_after: bytes | None = None  # schedule_cuts(after=...) not seen yet
        self._cut_before_reply = False
        self._drop_next_post = False
        self._before: tuple[bytes, Callable[[], Awaitable[None]]] | None = None
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None
        self._closed: list[asyncio.Server] = []
        self._handlers: set[asyncio.Task[None]] = set()

    def url(self, path: str = "/mcp") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def start(self) -> None:
        await self.accept()  # on port 0 the first time: the system picks a free one

    async def accept(self) -> None:
        """(Re)open the listening socket on the same port."""
        if self._server is None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
            self.port = int(self._server.sockets[0].getsockname()[1])

    async def refuse(self) -> None:
        """Close the listening socket: new connections are refused until :meth:`accept`.
        Connections already made go on (cut them with :meth:`cut_all`)."""
        if self._server is not None:
            self._server.close()  # closes the listening socket at once
            self._closed.append(self._server)
            self._server = None

    async def stop(self) -> None:
        await self.refuse()
        self.cut_all()
        handlers = list(self._handlers)
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        for server in self._closed:
            await server.wait_closed()

    # ------------------------------------------------------------------ faults
    def cut_all(self, *, reset: bool = True) -> int:
        """Drop every current connection; return how many."""
        links = list(self._links)
        for link in links:
            self._cut(link, reset=reset)
        return len(links)

    def schedule_cuts(self, offsets: list[int], *, after: bytes | None = None) -> None:
        """Cut after each of these server→client byte offsets, counted from now, or with
        ``after`` from the start of the first read that holds those bytes (a call's first
        progress notification, say, whatever the client sent before)."""
        self.bytes_down = 0
        self._cuts_at = sorted(offsets)
        self._count_after = after

    @property
    def cuts_pending(self) -> int:
        return len(self._cuts_at)

    def cut_before_reply(self) -> None:
        """The next POST gets to the server; its connection is cut at the first reply byte."""
        self._cut_before_reply = True

    def drop_next_post(self) -> None:
        """The next POST never reaches the server: its connection is reset as its first
        bytes arrive (a replica killed with the request on its way)."""
        self._drop_next_post = True

    def before_forwarding(self, marker: bytes, hook: Callable[[], Awaitable[None]]) -> None:
        """The next client bytes holding ``marker`` (in one read) wait for ``hook`` to
        run before they are forwarded (once): something happens at the server between a
        request's sending and its arrival."""
        self._before = (marker, hook)

    def _cut(self, link: _Link, *, reset: bool) -> None:
        if link not in self._links:
            return
        self._links.discard(link)
        self.cuts += 1
        for writer in (link.client, link.server):
            if writer is not None:
                abort(writer, reset=reset)
        current = asyncio.current_task()
        for task in link.tasks:
            if task is not current:
                task.cancel()

    # ------------------------------------------------------------------ forwarding
    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        link = _Link(writer)
        self.connections += 1
        try:
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                writer.transport.abort()
                return
            link.server = up_writer
            self._links.add(link)
            link.tasks = [
                asyncio.create_task(self._up(link, reader, up_writer)),
                asyncio.create_task(self._down(link, up_reader, writer)),
            ]
            await asyncio.gather(*link.tasks, return_exceptions=True)
        except asyncio.CancelledError:
            # stop() cancels handlers (and a cut cancels a link's pumps). A handler that
            # ends cancelled is logged as an error by asyncio 3.11's stream callback
            # (task.exception() raises): it ends normally instead; stop() only waits.
            pass
        finally:
            self._links.discard(link)
            for w in (writer, link.server):
                if w is not None:
                    w.transport.abort()
            self._handlers.discard(task)

    async def _up(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Client → server, as is."""
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(_CHUNK):
                if self._drop_next_post and data.startswith(b"POST"):
                    self._drop_next_post = False
                    self._cut(link, reset=True)
                    return
                if self._before is not None and self._before[0] in data:
                    hook, self._before = self._before[1], None
                    await hook()
                self.sent_to_server += data
                if self._cut_before_reply and not link.got_request and data.startswith(b"POST"):
                    link.got_request = True
                    self._cut_before_reply = False
                    link.cut_on_reply = True
                writer.write(data)
                await writer.drain()
            writer.write_eof()

    async def _down(
        self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Server → client, counting bytes and cutting where told."""
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(_CHUNK):
                if link.cut_on_reply:
                    self._cut(link, reset=True)
                    return
                if self._count_after is not None and self._count_after in link.tail + data:
                    self._count_after = None
                    self.bytes_down = 0
                self._note_session(link, data)
                start = self.bytes_down
                if self._count_after is not None:
                    writer.write(data)  # not counted yet
                    await writer.drain()
                    continue
                if self._cuts_at and self._cuts_at[0] < start + len(data):
                    # Offsets count forwarded bytes: the rest of this chunk is never
                    # forwarded, so the next offset applies to what comes next.
                    keep = max(0, self._cuts_at.pop(0) - start)
                    writer.write(data[:keep])
                    self.bytes_down += keep
                    with contextlib.suppress(ConnectionError, OSError):
                        await writer.drain()
                    self._cut(link, reset=False)
                    return
                self.bytes_down += len(data)
                writer.write(data)
                await writer.drain()
            writer.write_eof()

    def _note_session(self, link: _Link, data: bytes) -> None:
        window = link.tail + data
        for match in _SESSION_ID.finditer(window):
            value = match.group(1).decode()
            if value not in self.session_ids:
                self.session_ids.append(value)
        link.tail = window[-256:]
