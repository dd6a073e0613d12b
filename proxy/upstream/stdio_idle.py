"""Stopping a session's stdio server process for idleness, and starting it again
(``upstream.stop_idle_seconds``; docs/upstreams.md).

The core decides when (:class:`~proxy.core.events.StopIdleUpstream`: no connection and no
request in flight for that long); :class:`IdleStop`, a part of
:class:`~proxy.upstream.stdio.StdioUpstream`, carries it out: the process is stopped as
any session's is (stdin closed, SIGTERM, SIGKILL after the grace, its descendants too)
and its exit is not a crash. The next message :meth:`StdioUpstream.send` takes starts it
again through the respawn's own start and re-initialization (the client's
``initialize``, then ``notifications/initialized``; :meth:`StdioUpstream._respawn` with
``woken``), and then goes to it.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from proxy.upstream.base import UpstreamContext
from proxy.upstream.lineage import Lineage

log = structlog.get_logger("proxy.upstream.stdio")


class IdleStop:
    """The idle stop and the start after it, for :class:`StdioUpstream` (which sets up
    these attributes and implements the methods declared below)."""

    _context: UpstreamContext
    _stopping: bool
    _proc: asyncio.subprocess.Process | None
    _lineage: Lineage | None
    _writer: asyncio.Task[None] | None
    _respawner: asyncio.Task[None] | None

    def __init__(self) -> None:
        self._idle_stop: asyncio.Task[None] | None = None  # stopping, or stopped
        self._idle_stopping = False  # its exit now is the idle stop's, not a crash
        self._asleep = False  # stopped, and no start begun since
        self._waking = False  # a message came: the process is started again (_wake)

    async def _end_process(self, proc: asyncio.subprocess.Process, lineage: Lineage) -> None:
        raise NotImplementedError

    async def _respawn(self, reason: str, *, woken: bool = False) -> None:
        raise NotImplementedError

    def _wake_for_message(self) -> None:
        """A message was queued for the server: start it again if it is stopped."""
        if self._idle_stop is not None and not self._waking:
            self._waking = True
            self._respawner = asyncio.create_task(self._wake())

    def stop_idle(self) -> None:
        """Stop the process for idleness (``upstream.stop_idle_seconds``): the session
        stays, and the next message :meth:`send` takes starts the process again.

        Before any ``await``: the writer stops taking messages (what is sent from now on
        waits for the next process, never goes to this one) and a restart under way
        (after a crash) is called off; from here on an exit is not a crash."""
        if self._stopping or self._idle_stop is not None or self._proc is None:
            return
        restart, writer = self._respawner, self._writer
        for task in (restart, writer):
            if task is not None:
                task.cancel()
        self._idle_stopping = True
        self._idle_stop = asyncio.create_task(
            self._stop_idle(restart, writer), name=f"idle-stop-{self._context.label}"
        )

    @property
    def stopped_idle(self) -> bool:
        """Its process is stopped for idleness, or being stopped, and not started again."""
        return self._idle_stop is not None and not self._waking

    async def _stop_idle(
        self, restart: asyncio.Task[None] | None, writer: asyncio.Task[None] | None
    ) -> None:
        try:
            for task in (restart, writer):
                if task is not None:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            proc, lineage = self._proc, self._lineage
            assert proc is not None and lineage is not None
            await asyncio.to_thread(lineage.scan)  # its tree, before the leader's exit
            if proc.stdin is not None:
                with contextlib.suppress(Exception):
                    proc.stdin.close()  # the polite request
            await self._end_process(proc, lineage)
        finally:
            self._idle_stopping = False
        self._asleep = True
        log.info("upstream_idle_stopped", session=self._context.label, pid=proc.pid)

    async def _wake(self) -> None:
        """Start the process stopped for idleness again, re-initialized as after a crash
        (:meth:`_respawn`), once its stop is over."""
        idle_stop = self._idle_stop
        assert idle_stop is not None
        try:
            await asyncio.shield(idle_stop)
            self._asleep = False
            if not self._stopping:
                await self._respawn("stopped idle", woken=True)
        finally:
            self._idle_stop = None
            self._waking = False
