"""In-process wake-ups for :meth:`Store.tail` (memory and sqlite): one event per watcher."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable


class Wakeups:
    """Watchers by key; :meth:`wake` sets every watcher of the keys a commit touched."""

    def __init__(self) -> None:
        self._watchers: dict[str, set[asyncio.Event]] = {}
        self.closed = False

    def watch(self, key: str) -> asyncio.Event:
        """Watch ``key`` (before reading, so no commit between read and wait is missed)."""
        event = asyncio.Event()
        if self.closed:
            event.set()
        self._watchers.setdefault(key, set()).add(event)
        return event

    def unwatch(self, key: str, event: asyncio.Event) -> None:
        watchers = self._watchers.get(key)
        if watchers is not None:
            watchers.discard(event)
            if not watchers:
                del self._watchers[key]

    @property
    def watched(self) -> bool:
        """Whether any key is watched (a commit with no tail to wake names no keys)."""
        return bool(self._watchers)

    def wake(self, keys: Iterable[str]) -> None:
        for key in keys:
            for event in self._watchers.get(key, ()):
                event.set()

    def close(self) -> None:
        """The store closes: every tail wakes (and finds the store closed)."""
        self.closed = True
        for watchers in self._watchers.values():
            for event in watchers:
                event.set()
