"""A client's request meets a store that does not answer: it waits a bounded time, then
gets a documented error (DESIGN.md §9; docs/errors.md ``store_unavailable``).

:func:`patiently` runs one store call for a request: a :class:`StoreError` (Redis
restarting or unreachable, SQLite busy) is retried with backoff (:mod:`proxy.backoff`)
for up to ``store.unavailable_wait_seconds`` (:attr:`Store.unavailable_wait`), then the
request is refused with :class:`~proxy.core.errors.StoreUnavailable`: HTTP 503,
``Retry-After``, JSON-RPC -32000 ``store_unavailable``. Never an HTTP 500.

Only calls that may run twice are retried (reads, leases, a session record, a client's
answers forwarded to the replica holding its session: the session drops one it has had);
any other message to another replica is not (:func:`unavailable`: refused at once), and
a call already refused never reached the store, so the client may send its request again.
Background work (commits, renewals, tails) keeps its own retry loops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import structlog

from proxy.backoff import Backoff
from proxy.core.errors import StoreUnavailable
from proxy.store.base import Store, StoreError

log = structlog.get_logger("proxy.store")

T = TypeVar("T")

RETRY_AFTER_SECONDS = 1.0
"""What ``Retry-After`` says: a store back from a restart answers at once."""


def unavailable(doing: str, exc: StoreError) -> StoreUnavailable:
    """The refusal of a request whose store call ``doing`` failed with ``exc``."""
    log.warning("store_unavailable_request", doing=doing, error=str(exc))
    return StoreUnavailable(
        f"the proxy's store is unavailable ({doing}); try again", RETRY_AFTER_SECONDS
    )


async def patiently(
    store: Store, doing: str, call: Callable[[], Awaitable[T]], wait: float | None = None
) -> T:
    """``await call()``, retried on StoreError for up to ``wait`` seconds (default
    ``store.unavailable_wait``); then :class:`StoreUnavailable` (``doing`` names the call
    in its message)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (store.unavailable_wait if wait is None else wait)
    backoff = Backoff(first=0.05, cap=1.0)
    while True:
        try:
            return await call()
        except StoreError as exc:
            left = deadline - loop.time()
            if left <= 0:
                raise unavailable(doing, exc) from exc
            await asyncio.sleep(min(backoff.next_delay(), left))
