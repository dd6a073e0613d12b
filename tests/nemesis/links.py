"""A replica's own link to Redis, which the nemesis can take down: a TCP relay on
127.0.0.1 in front of the Redis server, one per replica, so that one replica alone loses
the store (a network partition between it and Redis) while the others and the clients
still reach it.

``down()`` resets every connection through the relay (RST: the replica's reads and writes
fail at once, as when a partition is noticed) and closes its listening socket, so new
connections are refused until ``up()`` opens it again on the same port. ``hang()`` is
the other kind of partition, where packets go nowhere and nothing says so: nothing
flows either way, on the connections made and on new ones (accepted, then held), until
``up()``, when what was sent meanwhile arrives late, in order (a command may reach Redis
after the replica gave up waiting for its reply and closed the connection: TCP delivers
what was sent before the close). A Redis restart behind the relay ends the relayed
connections too, as it would direct ones.
"""

from __future__ import annotations

import asyncio
import contextlib

from tests.cut_proxy import abort

_CHUNK = 256 * 1024


class RedisLink:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._closed: list[asyncio.Server] = []
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()  # cleared by hang(): nothing is forwarded
        self._flowing.set()

    @property
    def is_up(self) -> bool:
        return self._server is not None

    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def up(self) -> None:
        """(Re)open the listening socket, on the same port after the first time; let
        what a hang held through."""
        self._flowing.set()
        if self._server is None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
            self.port = int(self._server.sockets[0].getsockname()[1])

    def down(self) -> int:
        """Refuse new connections and reset the current ones; how many were reset."""
        if self._server is not None:
            self._server.close()
            self._closed.append(self._server)
            self._server = None
        pairs = list(self._pairs)
        for pair in pairs:
            self._reset(pair)
        return len(pairs)

    def hang(self) -> None:
        """Forward nothing, either way, on any connection, until :meth:`up`."""
        self._flowing.clear()

    async def close(self) -> None:
        self.down()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in self._closed:
            await server.wait_closed()

    def _reset(self, pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter]) -> None:
        self._pairs.discard(pair)
        for writer in pair:
            abort(writer)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._flowing.wait()  # a hang holds a new connection too
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:  # Redis itself is down: refused, as a direct connection is
                writer.transport.abort()
                return
            pair = (writer, up_writer)
            if self._server is None:  # went down while connecting
                self._reset(pair)
                return
            self._pairs.add(pair)
            await asyncio.gather(
                self._pump(reader, up_writer), self._pump(up_reader, writer), return_exceptions=True
            )
            self._reset(pair)
        except asyncio.CancelledError:
            pass  # close(): end normally (asyncio 3.11 logs a cancelled stream callback)
        finally:
            self._tasks.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(_CHUNK):
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        # One side ended: so does the other (a Redis restart, a replica's close).
        writer.transport.abort()
