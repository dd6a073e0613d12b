"""The live tail of one stream's log, read for one response (:mod:`proxy.downstream.stored`).

A :class:`LogTail` runs the one reader of the store's tail of a stream in a task of its
own, filling a queue with batches of entries as they are committed; the response writes
what the queue holds. The reader ends with :data:`END` (the stream completed), the
``ResumeError`` that ended the stream, or the ``StoreError`` of a store that failed for
longer than ``store.unavailable_wait_seconds`` (the client resumes from its last event).
Whoever made it ends it (:meth:`LogTail.end`).
"""

from __future__ import annotations

import asyncio

import structlog

from proxy.backoff import Backoff
from proxy.core.errors import ResumeError
from proxy.store.base import Entry, Store, StoreError

log = structlog.get_logger("proxy.stored")

END = object()
"""The last item of a tail's queue when the stream completed (or cannot be read on)."""

Item = list[Entry] | object  # a batch of entries, END, a ResumeError or a StoreError


class Stopping(StoreError):
    """The last item of every tail's queue once the proxy stops (:meth:`Tails.stop`):
    the response ends as after a store that failed, and the client resumes from its last
    event on another replica."""


class Tails:
    """The log tails open in this process (one per response that follows a stream from
    the store; the context owns it), so that a stopping proxy ends those responses
    before its store closes (:meth:`stop`), instead of each retrying a closed store."""

    def __init__(self) -> None:
        self._open: set[LogTail] = set()
        self.stopping = False

    def add(self, tail: LogTail) -> None:
        self._open.add(tail)
        if self.stopping:
            tail.stop()

    def discard(self, tail: LogTail) -> None:
        self._open.discard(tail)

    def stop(self) -> None:
        """End every response that follows a tail, now and from now on."""
        self.stopping = True
        for tail in self._open:
            tail.stop()


class LogTail:
    """The one reader of a stream's log for one response: :func:`read_tail` in a task,
    filling :attr:`queue` with batches of entries, then :data:`END`, the
    ``ResumeError`` that ended it or the ``StoreError`` it gave up on (or
    :class:`Stopping`). Its holder ends it (:meth:`end`); ``tails`` knows it meanwhile."""

    def __init__(
        self,
        store: Store,
        key: str,
        after: int,
        tails: Tails | None = None,
        *,
        ended: bool = False,
    ) -> None:
        """``ended``: the reader already has the whole stream (:func:`read_to_end`):
        nothing is read, the queue holds :data:`END`."""
        self.queue: asyncio.Queue[Item] = asyncio.Queue()
        self._tails = None if ended else tails
        self._task: asyncio.Task[None] | None = None
        if ended:
            self.queue.put_nowait(END)
            return
        self._task = asyncio.create_task(read_tail(store, key, after, self.queue))
        if tails is not None:
            tails.add(self)

    def stop(self) -> None:
        """The proxy stops: the response ends after what the queue holds."""
        self.queue.put_nowait(Stopping("the proxy is stopping: resume on another replica"))

    async def end(self) -> None:
        """Cancel the reader and wait until it is gone (at once: a cancelled tail of the
        store ends with its cancellation, :mod:`proxy.store.redis_commands`)."""
        if self._tails is not None:
            self._tails.discard(self)
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


async def read_tail(store: Store, key: str, after: int, queue: asyncio.Queue[Item]) -> None:
    """Tail ``key`` into ``queue``; a store that fails (Redis restarting) is tailed
    again from the last event given, for up to ``store.unavailable_wait_seconds`` in
    a row, before it gives up (its last item, the StoreError: the client then resumes
    with its last id)."""
    loop = asyncio.get_running_loop()
    backoff = Backoff(first=0.05, cap=1.0)
    failing_since: float | None = None
    while True:
        try:
            async for batch in store.tail(key, after):
                queue.put_nowait(batch)
                if batch:
                    after = batch[-1].seq
                failing_since = None
            break
        except ResumeError as exc:
            queue.put_nowait(exc)
            return
        except StoreError as exc:
            now = loop.time()
            failing_since = now if failing_since is None else failing_since
            if now - failing_since >= store.unavailable_wait:
                log.warning("stored_stream_tail_failed", stream=key, error=str(exc))
                queue.put_nowait(exc)
                return
            await asyncio.sleep(backoff.next_delay())
        except Exception as exc:  # the store failed otherwise: end the response, log why
            log.warning("stored_stream_tail_failed", stream=key, error=str(exc))
            queue.put_nowait(StoreError(f"tail {key}: {exc}"))
            return
    queue.put_nowait(END)


def ends_tail(item: Item) -> bool:
    """The tail is over: the stream completed (:data:`END`), went (``ResumeError``) or
    cannot be read on (``StoreError``)."""
    return not isinstance(item, list)
