"""The proxy adopts what its servers' processes orphan, and reaps it (Linux).

A process that leaves its parent behind (a daemon: ``fork``, ``setsid``, ``fork`` again,
the middle one exits) is normally re-parented to init, out of anyone's reach. Once the
proxy process has called ``prctl(PR_SET_CHILD_SUBREAPER, 1)`` (prctl(2), Linux 3.4+),
such orphans of its descendants become *its* children instead: they stay in sight, in
``/proc``, so that :mod:`proxy.upstream.lineage` can end them with the server they came
from, and their exit statuses come to the proxy, which must collect them or they remain
zombies.

:class:`Reaper` collects them. On ``SIGCHLD`` it looks at the proxy's own children and
``waitpid``\\ s each *zombie* among them that is not one of asyncio's: asyncio's child
watcher (pidfds on 3.11 as the CLI sets it, and by default from 3.12) waits for each
server process by its pid and must get that status itself. So every server process is
:meth:`~Reaper.own`\\ ed from the moment it is forked (:meth:`~Reaper.spawning` covers the
fork itself, before its pid is known; nothing is reaped meanwhile) until asyncio has
reaped it. Nothing else in the proxy starts processes.

Only the CLI adopts (:func:`adopt`, before the event loop starts; :meth:`Reaper.stop`
undoes it): a test or a host process that runs the proxy's pieces in-process keeps its
own children's statuses. Elsewhere than Linux nothing is adopted (orphans go to init, as
before) and the reaper does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Iterator

import structlog

from proxy.upstream import proctable
from proxy.upstream.deathsig import load_prctl

log = structlog.get_logger("proxy.upstream.subreaper")

_PR_SET_CHILD_SUBREAPER = 36


def own_children() -> list[int]:
    """The pids of this process's children (its threads' included), zombies too."""
    return proctable.children(os.getpid())


class Reaper:
    """Reaps the orphans the proxy adopted; never a process asyncio waits for."""

    def __init__(self) -> None:
        self.adopted = False
        self._own: set[int] = set()
        self._spawning = 0
        self._again = False  # a SIGCHLD came while a fork was under way
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False

    def adopt(self) -> bool:
        """Become the subreaper of every descendant (this process; Linux only)."""
        prctl = load_prctl()
        if prctl is not None and prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0:
            self.adopted = True
        else:
            log.info("orphans_not_adopted", reason="PR_SET_CHILD_SUBREAPER is Linux only")
        return self.adopted

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Reap on every ``SIGCHLD`` (if :meth:`adopt` took)."""
        if self.adopted and self._loop is None:
            self._loop = loop
            loop.add_signal_handler(signal.SIGCHLD, self._on_sigchld)

    def stop(self) -> None:
        """Stop reaping and adopting: the proxy is done with its children."""
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.remove_signal_handler(signal.SIGCHLD)
        if self.adopted:
            self.reap()
            prctl = load_prctl()
            if prctl is not None:
                prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
            self.adopted = False

    # ------------------------------------------------------------------ asyncio's own
    @contextlib.contextmanager
    def spawning(self) -> Iterator[None]:
        """Around a fork whose pid is not known yet: nothing is reaped meanwhile."""
        self._spawning += 1
        try:
            yield
        finally:
            self._spawning -= 1
            if not self._spawning and self._again:
                self._again = False
                self.reap()

    def own(self, pid: int) -> None:
        """``pid`` is asyncio's child: its status is asyncio's."""
        self._own.add(pid)

    def disown(self, pid: int) -> None:
        """asyncio has reaped ``pid``."""
        self._own.discard(pid)

    def owned(self) -> frozenset[int]:
        """asyncio's children now (a copy: safe to use from another thread)."""
        return frozenset(self._own)

    # ------------------------------------------------------------------ reaping
    def _on_sigchld(self) -> None:
        if not self._scheduled and self._loop is not None:
            self._scheduled = True
            self._loop.call_soon(self._reap_scheduled)

    def _reap_scheduled(self) -> None:
        self._scheduled = False
        self.reap()

    def reap(self) -> int:
        """Collect every adopted orphan that has exited; how many."""
        if not self.adopted:
            return 0
        if self._spawning:
            self._again = True
            return 0
        reaped = 0
        for pid in own_children():
            if pid in self._own:
                continue
            proc = proctable.read(pid)
            if proc is None or proc.running:
                continue
            with contextlib.suppress(ChildProcessError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    reaped += 1
        return reaped

    def unclaimed(self) -> list[proctable.Proc]:
        """The adopted orphans that still run (none once every server has ended, unless
        one left its server's sight: see :mod:`proxy.upstream.lineage`)."""
        found = []
        for pid in own_children():
            proc = proctable.read(pid)
            if pid not in self._own and proc is not None and proc.running:
                found.append(proc)
        return found


REAPER = Reaper()
"""The proxy's one reaper: adoption is a property of the whole process."""
