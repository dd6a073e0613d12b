"""The Redis store's commands in flight (:mod:`proxy.store.redis`): each runs in a task of
its own that its caller waits on, so that a cancelled caller always ends at once.

redis-py cannot promise that by itself. It writes every command under
``asyncio.wait_for``, which on Python 3.11 hands a caller cancelled in the loop iteration
in which the write ends the command's result instead of its cancellation (CPython
gh-86296, fixed in 3.12): a tail cancelled there went on reading until its stream ended.
And its clean-up of a cancelled blocking read has been seen to hang a stop for good. A
caller here waits on the command's task (``asyncio.wait`` always raises a cancellation);
the command is cancelled, again until it ends, but not waited for; :meth:`Commands.cancel`
cancels every command left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

T = TypeVar("T")

RECANCEL_SECONDS = 0.1
"""How often a command whose caller left is cancelled again while it still runs."""


class Ended(Exception):
    """The command was ended by :meth:`Commands.cancel`, not by its caller."""


def cancel_until_done(command: asyncio.Future[Any]) -> None:
    """Cancel ``command``, and again every :data:`RECANCEL_SECONDS` until it ends: redis-py
    can swallow one cancel, and a blocking read that swallowed it would hold its
    connection for its whole block."""
    if not command.done():
        command.cancel()
        asyncio.get_running_loop().call_later(RECANCEL_SECONDS, cancel_until_done, command)


class Commands:
    """The commands one store runs; each is forgotten (its outcome read) once it ends."""

    def __init__(self) -> None:
        self._running: set[asyncio.Future[Any]] = set()

    def __len__(self) -> int:
        return len(self._running)

    async def run(self, command: Awaitable[T]) -> T:
        """``command``'s result or error, or :class:`Ended` if :meth:`cancel` ended it; a
        caller cancelled meanwhile ends at once with CancelledError."""
        running = asyncio.ensure_future(command)
        self._running.add(running)
        running.add_done_callback(self._settle)
        try:
            await asyncio.wait({running})
        except asyncio.CancelledError:
            cancel_until_done(running)
            raise
        if running.cancelled():  # by cancel(): the caller itself is not
            raise Ended
        return running.result()

    def _settle(self, running: asyncio.Future[Any]) -> None:
        self._running.discard(running)
        if not running.cancelled():
            running.exception()  # read: a command its caller left is read by no one else

    def cancel(self) -> None:
        """Cancel every command (:meth:`run` raises :class:`Ended` to its caller)."""
        for command in self._running:
            cancel_until_done(command)

    async def ended(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for every command to end; how many still run."""
        if not self._running:
            return 0
        _, stuck = await asyncio.wait(set(self._running), timeout=timeout)
        return len(stuck)
