"""Every descendant of one stdio server process, ended with it (issue 19 item 7).

Killing the server's process group reaches what stayed in the group. A descendant that
calls ``setsid()`` (or ``setpgid``) leaves it, and one whose parent exits is orphaned:
a daemon does both. A :class:`Lineage` finds them all, by what it knows of them:

- its tree: every process whose parent chain leads to the server, or to a descendant
  already seen (:meth:`Lineage.scan` remembers each by pid and start time);
- the server's session and process group (``setpgid`` alone leaves the group, not the
  session);
- a tag in the environment: each server is started with ``MCP_RESUME_PROXY_SERVER=
  PROXYPID.N``, which its descendants inherit. With the proxy as subreaper
  (:mod:`proxy.upstream.subreaper`) an orphan becomes the proxy's child, and a child of
  the proxy that is not a server process and carries the tag came from that server.

:meth:`Lineage.end` sends SIGTERM to each (none if the grace is 0), SIGKILL after the
grace to what is left, and looks again until nothing is left (a process may fork while it
is being ended); the subreaper then collects the exits. What escapes: a descendant that
both clears its environment and is orphaned before anyone looked (it is then an
unclaimed child of the proxy, ended when the proxy stops, :func:`end_unclaimed`); and
everything when the proxy itself is SIGKILLed (orphans then go to init; only the server
process has ``PR_SET_PDEATHSIG``). No cgroup is used: a writable cgroup v2 subtree needs
delegation (systemd ``Delegate=``, a container's own cgroup namespace) that a sidecar
rarely has, while a subreaper needs no privilege.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from collections.abc import Iterable

import structlog

from proxy.upstream import proctable
from proxy.upstream.proctable import Proc
from proxy.upstream.subreaper import REAPER, own_children

log = structlog.get_logger("proxy.upstream.lineage")

TAG_VARIABLE = "MCP_RESUME_PROXY_SERVER"
_serials = itertools.count(1)
_KILL_ROUNDS = 10  # looks after SIGKILL: each catches what forked during the last


def _tree(roots: Iterable[int], procs: dict[int, Proc]) -> set[int]:
    """``roots`` and every descendant of them in ``procs``."""
    children: dict[int, list[int]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    found: set[int] = set()
    todo = [pid for pid in roots if pid in procs]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def _runs(proc: Proc) -> bool:
    """Whether that very process still runs (not exited, its pid not someone else's)."""
    now = proctable.read(proc.pid)
    return now is not None and now.start == proc.start and now.running


async def _until_gone(procs: list[Proc], seconds: float) -> list[Proc]:
    """Wait up to ``seconds`` for ``procs`` to end; those still running."""
    deadline = time.monotonic() + seconds
    pause = 0.005
    while True:
        left = [p for p in procs if _runs(p)]
        if not left or time.monotonic() >= deadline:
            return left
        await asyncio.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        pause = min(pause * 2, 0.1)


class Lineage:
    """The descendants of one server process (:attr:`root`, set once it is forked)."""

    def __init__(self) -> None:
        self.tag = f"{os.getpid()}.{next(_serials)}"
        self.root: int | None = None
        self._root_start: int | None = None  # its start time: the pid may be reused
        self._term_at: float | None = None  # when terminate() sent SIGTERM (monotonic)
        self._known: dict[int, int] = {}  # pid -> start time, of every descendant seen

    @property
    def env_entry(self) -> str:
        return f"{TAG_VARIABLE}={self.tag}"

    def started(self, pid: int) -> None:
        """The server process was forked: asyncio's child until :meth:`reaped`."""
        self.root = pid
        REAPER.own(pid)
        found = proctable.read(pid)
        self._root_start = found.start if found is not None else None

    def reaped(self) -> None:
        """asyncio collected the server process's exit."""
        if self.root is not None:
            REAPER.disown(self.root)

    def remember(self, procs: Iterable[Proc]) -> None:
        """Count ``procs`` (and what descends from them) in."""
        self._known.update((p.pid, p.start) for p in procs)

    def _members(self, table: dict[int, Proc]) -> list[Proc]:
        """Every running descendant in ``table`` (the server process itself left out)."""
        me = os.getpid()
        root = self.root
        if root is not None and root in table and table[root].start != self._root_start:
            root = None  # gone, and its pid someone else's already: no longer a key
        # Every other server process (asyncio's children) is no one's descendant here:
        # neither it nor what descends from it is reached through it.
        owned = REAPER.owned()
        procs = {pid: p for pid, p in table.items() if pid == root or pid not in owned}
        known = list(self._known.items())  # one copy (a crash's end() may scan meanwhile)
        roots = {pid for pid, start in known if pid in procs and procs[pid].start == start}
        sessions = {procs[pid].sid for pid in roots}
        if root is not None:
            roots.add(root)
            sessions.add(root)
        sessions -= {0, 1, me, os.getsid(0)}  # never the proxy's own session
        for proc in procs.values():
            if proc.sid in sessions or (root is not None and proc.pgrp == root):
                roots.add(proc.pid)
        tag = self.env_entry
        for pid in own_children():  # orphans the proxy adopted: theirs if tagged
            if pid in procs and pid != root and proctable.environ_has(pid, tag):
                roots.add(pid)
        found = _tree(roots, procs) - {root, me}
        members = [procs[pid] for pid in found if procs[pid].running]
        self._known.update((p.pid, p.start) for p in members)
        return members

    def scan(self) -> list[Proc]:
        """Look now: every running descendant (each remembered, also once orphaned)."""
        if REAPER.adopted and proctable.CHILDREN_LISTED:
            # Every descendant is below the server, below one already seen, or (orphaned)
            # below the proxy: walk down from those alone, not through the whole machine.
            owned = REAPER.owned()
            adopted = [pid for pid in own_children() if pid not in owned]
            roots = [*([self.root] if self.root is not None else []), *list(self._known)]
            roots += adopted
            return self._members(proctable.subtree(roots))
        return self._members(proctable.table())

    def terminate(self) -> None:
        """SIGTERM every descendant seen so far, now (with the server's group): the grace
        of :meth:`end` counts from here."""
        self._term_at = time.monotonic()
        for pid, start in list(self._known.items()):
            proc = proctable.read(pid)
            if proc is not None and proc.start == start:
                proctable.send(proc, signal.SIGTERM)

    async def end(self, grace: float) -> int:
        """SIGTERM every descendant, SIGKILL after ``grace`` (from :meth:`terminate`, if
        it came first) what is left (at once if ``grace`` is 0), until none runs; how many
        there were."""
        members = await asyncio.to_thread(self.scan)
        if not members:
            return 0
        seen = {p.pid for p in members}
        if self._term_at is not None:
            grace = max(0.0, grace - (time.monotonic() - self._term_at))
        if grace > 0:
            for proc in members:
                proctable.send(proc, signal.SIGTERM)
            members = await _until_gone(members, grace)
        for _ in range(_KILL_ROUNDS):
            for proc in members:
                proctable.send(proc, signal.SIGKILL)
            await _until_gone(members, 1.0)
            REAPER.reap()
            members = await asyncio.to_thread(self.scan)
            seen.update(p.pid for p in members)
            if not members:
                break
        else:
            log.warning("descendants_survive", server=self.root, pids=[p.pid for p in members])
        log.info("descendants_ended", server=self.root, count=len(seen))
        self._known.clear()
        return len(seen)


async def end_unclaimed(grace: float) -> int:
    """At the proxy's stop, after every server ended: end the orphans it adopted that no
    server claimed (and their descendants), then reap them."""
    if not REAPER.adopted:
        return 0
    unclaimed = REAPER.unclaimed()
    if not unclaimed:
        return 0
    stray = Lineage()
    stray.remember(unclaimed)
    return await stray.end(grace)
