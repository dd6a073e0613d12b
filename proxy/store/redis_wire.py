"""A pipelined connection of the Redis store's own to one server: the hot commands
(a call's commit, a stream's read) without redis-py's connection pool, and with the
fewest turns of the event loop.

Through redis-py, one ``EVALSHA`` took ~6 turns of the loop: the command's task
(:mod:`proxy.store.redis_commands`) started, redis-py's ``asyncio.wait_for`` around the
write made a task of its own (Python 3.11) and waited for it, the reply woke the reader,
and the command's end woke the caller through ``asyncio.wait``. While the loop is busy
(a long resume being written, a burst relayed: turns of ~1.3 ms) that was ~8 ms per
commit, and a call's answer, which waits for its commit, waited for about three of them.
Here a command is written at once, in the caller's turn; :class:`_Link` reads every reply
as it arrives (``hiredis``, in ``data_received``) and resolves the caller's future, so the
caller goes on in the next turn: two turns per command, whatever else runs.

Replies come in the order their commands were sent, so a connection stays in step
whatever its callers do: a caller cancelled (or timed out) while waiting leaves its
future cancelled and its reply, when it comes, is read and dropped. A cancelled caller
ends at once with :class:`~asyncio.CancelledError`; nothing of it runs on.

A ``READONLY`` error reply (the server was made a replica: a failover moved the master
behind the same name) closes the connection once it is read, so the next command
connects anew, to whatever the URL names now; the command that got it fails, and the
wire's ``on_replica`` callback is told (the store drops its other connections).

As the redis-py client is configured (:func:`proxy.store.redis_client.connect`): a
command that finds its connection broken (a restarted Redis) is sent once more on a new
one (the store's commands are idempotent: a commit retried applies once); a command
unanswered for ``timeout`` seconds raises ``TimeoutError`` and drops the connection (the
commands waiting on it fail too, not retried), so an unresponsive server costs
``timeout``, not more. :meth:`Wire.close` fails every command still waiting with
:class:`Closed`.

``redis://`` (TCP) and ``unix://`` URLs, with their user, password and database (``AUTH``,
``SELECT`` on connecting), speak RESP2; a ``rediss://`` (TLS) URL has no wire
(:func:`wire_for` says ``None``): its store sends every command through redis-py, as a
cluster's does.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from hiredis import Reader, pack_command
from redis._parsers.base import BaseParser
from redis.asyncio.connection import parse_url
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, ReadOnlyError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

Arg = bytes | str | int


class Closed(RedisConnectionError):
    """The wire was closed (the store's :meth:`close`) while the command waited."""


Landed = Callable[[list[Any] | Exception], None]
"""What :meth:`Wire.send_then` calls with a command's replies, or the error that ended it."""


class _Request:
    __slots__ = ("count", "future", "landed", "replies", "timer")

    def __init__(
        self,
        future: asyncio.Future[list[Any]] | None,
        count: int,
        landed: Landed | None = None,
        timer: asyncio.TimerHandle | None = None,
    ) -> None:
        self.future = future
        self.count = count
        self.replies: list[Any] = []
        self.landed = landed  # (no future: called from data_received)
        self.timer = timer

    def settle(self, outcome: list[Any] | Exception) -> None:
        """Hand ``outcome`` to the caller: its future (unless it left), or its callback."""
        future = self.future
        if future is not None:
            if not future.done():  # else its caller left: dropped
                if isinstance(outcome, Exception):
                    future.set_exception(outcome)
                else:
                    future.set_result(outcome)
            return
        if self.timer is not None:
            self.timer.cancel()
        assert self.landed is not None
        try:
            self.landed(outcome)
        except Exception as exc:  # (a bug of the caller's: not the link's to die of)
            asyncio.get_running_loop().call_exception_handler(
                {"message": "a Redis reply's callback failed", "exception": exc}
            )


class _Link(asyncio.Protocol):
    """One connection: commands written in order, replies matched to them in order."""

    def __init__(self, on_replica: Callable[[], None] | None = None) -> None:
        self._on_replica = on_replica
        # An error reply is an exception instance in the replies (redis-py's classes:
        # NoScriptError, ResponseError, ...), never raised by the reader.
        self._reader = Reader(protocolError=InvalidResponse, replyError=BaseParser.parse_error)
        self._waiting: deque[_Request] = deque()
        self._transport: asyncio.Transport | None = None
        self.failed: Exception | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        waiting = self._waiting
        try:
            while (reply := self._reader.gets()) is not False:
                if not waiting:
                    raise InvalidResponse("a reply to no command")
                request = waiting[0]
                request.replies.append(reply)
                if len(request.replies) == request.count:
                    waiting.popleft()
                    request.settle(request.replies)
                if type(reply) is ReadOnlyError:  # (an error reply: the rare path)
                    # The server is a replica now (a failover moved the master, and this
                    # connection still reaches the old one): the next command connects
                    # anew, to whatever the URL names now.
                    self.fail(RedisConnectionError("the server became a replica (READONLY)"))
                    if self._on_replica is not None:
                        self._on_replica()
                    return
        except InvalidResponse as exc:
            self.fail(RedisConnectionError(f"the server's reply cannot be read: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(RedisConnectionError(f"the connection was lost: {exc or 'closed by Redis'}"))

    def fail(self, error: Exception) -> None:
        """Close the connection; every command waiting on it raises ``error``."""
        if self.failed is None:
            self.failed = error
        if self._transport is not None:
            self._transport.abort()
        while self._waiting:
            self._waiting.popleft().settle(error)

    @property
    def usable(self) -> bool:
        """Whether a command written now goes out (not failed, not closing)."""
        transport = self._transport
        return self.failed is None and transport is not None and not transport.is_closing()

    def send(self, packed: bytes, count: int) -> asyncio.Future[list[Any]]:
        """Write ``packed`` (``count`` commands) now; its ``count`` replies, when read."""
        if not self.usable:
            raise RedisConnectionError(f"the connection is closed: {self.failed or 'closing'}")
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Request(future, count))
        self._transport.write(packed)  # type: ignore[union-attr]
        return future

    def send_then(self, packed: bytes, count: int, landed: Landed, timeout: float) -> None:
        """Write ``packed`` (``count`` commands) now (the link :attr:`usable`); ``landed``
        is called with the replies from :meth:`data_received`, or with the error that
        closed the link (none within ``timeout`` seconds: TimeoutError, the link closed)."""
        loop = asyncio.get_running_loop()
        timer = loop.call_later(timeout, self._timed_out, timeout)
        self._waiting.append(_Request(None, count, landed, timer))
        self._transport.write(packed)  # type: ignore[union-attr]

    def _timed_out(self, timeout: float) -> None:
        self.fail(RedisTimeoutError(f"no reply from Redis in {timeout:g} s"))


class Wire:
    """A connection to the server ``url`` names, made on the first command and again
    after it broke; each command's replies or its error."""

    def __init__(
        self, url: str, timeout: float, on_replica: Callable[[], None] | None = None
    ) -> None:
        self._options = parse_url(url)
        self._on_replica = on_replica  # a READONLY reply came (see the module doc)
        self.timeout = timeout
        self._link: _Link | None = None
        self._connecting = asyncio.Lock()
        self._closed = False

    def send_then(self, packed: bytes, count: int, landed: Landed) -> bool:
        """Write ``packed`` (``count`` commands) now and return; ``landed`` is called with
        the replies as they are read (in :meth:`_Link.data_received`: no task, no future,
        no turn of the loop between the reply and the caller), or with the error that
        ended the link. Not retried here: False, nothing written, when no connection is
        up (the caller uses :meth:`call`, which makes one)."""
        link = self._link
        if self._closed or link is None or not link.usable:
            return False
        link.send_then(packed, count, landed, self.timeout)
        return True

    def send_now(self, packed: bytes, count: int = 1) -> asyncio.Future[list[Any]] | None:
        """Write ``packed`` (``count`` commands) now, its replies read later with
        :meth:`replies`; None, nothing written, when no connection is up. A future left
        unread (its caller went) is dropped with whatever it holds."""
        link = self._link
        if self._closed or link is None or not link.usable:
            return None
        future = link.send(packed, count)
        future.add_done_callback(_retrieved)
        return future

    async def replies(
        self, future: asyncio.Future[list[Any]], packed: bytes, count: int = 1
    ) -> list[Any]:
        """The replies to what :meth:`send_now` wrote (``packed``, ``count`` commands):
        as :meth:`call` gives them, sent once more on a new connection if that one broke;
        none within :attr:`timeout` of this call fails the connection."""
        try:
            return await self._replied(self._link, future)
        except RedisConnectionError:
            if self._closed:
                raise
            return await self._once(packed, count)  # a broken connection: once more

    async def call(self, packed: bytes, count: int = 1) -> list[Any]:
        """The replies to ``packed`` (``count`` packed commands), an error reply among
        them as an exception instance; raises ConnectionError / TimeoutError."""
        try:
            return await self._once(packed, count)
        except RedisConnectionError:
            if self._closed:
                raise
            return await self._once(packed, count)  # a broken connection: once more

    async def _once(self, packed: bytes, count: int) -> list[Any]:
        link = self._link
        if link is None or link.failed is not None:
            link = await self._connected()
        return await self._replied(link, link.send(packed, count))

    async def _replied(self, link: _Link | None, future: asyncio.Future[list[Any]]) -> list[Any]:
        """``future``'s replies; none within :attr:`timeout` fails ``link``."""
        try:
            async with asyncio.timeout(self.timeout):
                return await future
        except TimeoutError:
            error = RedisTimeoutError(f"no reply from Redis in {self.timeout:g} s")
            if link is not None:
                link.fail(error)
            raise error from None

    async def _connected(self) -> _Link:
        if self._closed:
            raise Closed("the wire is closed")
        async with self._connecting:  # one connection made for every caller waiting
            if self._link is not None and self._link.failed is None:
                return self._link
            link = await self._connect()
            if self._closed:  # closed while connecting
                link.fail(Closed("the wire is closed"))
                raise Closed("the wire is closed")
            self._link = link
            return link

    async def _connect(self) -> _Link:
        loop = asyncio.get_running_loop()
        options = self._options

        def made() -> _Link:
            return _Link(self._on_replica)

        hello: list[tuple[Arg, ...]] = []
        if options.get("password") is not None:
            user = options.get("username")
            hello.append(("AUTH", *((user,) if user else ()), options["password"]))
        if options.get("db"):
            hello.append(("SELECT", options["db"]))
        try:
            async with asyncio.timeout(self.timeout):
                if "path" in options:
                    _, link = await loop.create_unix_connection(made, options["path"])
                else:
                    host, port = options.get("host", "localhost"), options.get("port", 6379)
                    _, link = await loop.create_connection(made, host, port)
                if hello:
                    packed = b"".join(pack_command(command) for command in hello)  # type: ignore[arg-type]
                    replies = await link.send(packed, len(hello))
                    for reply in replies:
                        if isinstance(reply, Exception):
                            link.fail(RedisConnectionError(str(reply)))
                            raise reply
        except TimeoutError:
            raise RedisTimeoutError(f"connecting took over {self.timeout:g} s") from None
        except OSError as exc:
            raise RedisConnectionError(f"cannot connect: {exc}") from exc
        return link

    def drop(self) -> None:
        """Close the connection now (every command waiting on it fails with a broken
        connection, retried once as such); the next command connects anew."""
        if self._link is not None:
            self._link.fail(RedisConnectionError("connecting anew: the server became a replica"))

    def close(self) -> None:
        """Close the connection; every command still waiting raises :class:`Closed`."""
        self._closed = True
        if self._link is not None:
            self._link.fail(Closed("the redis store is closed"))


def _retrieved(future: asyncio.Future[list[Any]]) -> None:
    if not future.cancelled():
        future.exception()  # (read: a read sent ahead may be left by its tail)


def wire_for(url: str, timeout: float, on_replica: Callable[[], None] | None = None) -> Wire | None:
    """The wire for a ``redis://`` or ``unix://`` URL; None for ``rediss://`` (TLS)."""
    if url.lower().startswith("rediss://"):
        return None
    return Wire(url, timeout, on_replica)


def checked(replies: list[Any]) -> list[Any]:
    """``replies`` as they are; the first error reply among them raised."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def pack_transaction(commands: list[list[Arg]]) -> bytes:
    """``MULTI``, ``commands``, ``EXEC``, packed: ``len(commands) + 2`` replies."""
    packed = [pack_command(("MULTI",))]
    packed += [pack_command(tuple(command)) for command in commands]  # type: ignore[arg-type]
    packed.append(pack_command(("EXEC",)))
    return b"".join(packed)


def executed(replies: list[Any]) -> list[Any]:
    """The replies of a transaction's commands, from its ``MULTI`` … ``EXEC`` replies; an
    error reply (queued or executed) raised."""
    done = replies[-1]
    if isinstance(done, Exception):  # EXECABORT: a command was refused when queued
        checked(replies[:-1])
        raise done
    if done is None:  # EXEC refused (a WATCH would say so; none is used)
        raise ResponseError("the transaction was aborted")
    return checked(list(done))
