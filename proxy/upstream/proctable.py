"""The machine's processes as Linux ``/proc`` shows them (proc(5)): who is whose parent,
in which process group and session, and whether a pid still names the same process.

Each process is identified by its pid *and* its start time (``/proc/PID/stat`` field 22,
in clock ticks since boot): a pid alone may be reused once its process is gone, the pair
never is. Signals go through a pidfd where the kernel has them (Linux 5.3+,
:func:`send`), so a signal meant for a process that just ended never reaches a stranger
that got its pid. Where ``/proc`` is missing (not Linux) every table is empty.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class Proc:
    """One process: ``state`` is ps(1)'s letter (``Z``: exited, not yet reaped)."""

    pid: int
    ppid: int
    pgrp: int
    sid: int
    state: str
    start: int

    @property
    def running(self) -> bool:
        return self.state not in ("Z", "X")


def _parse(pid: int, text: str) -> Proc | None:
    # "PID (COMM) STATE PPID PGRP SESSION ... STARTTIME(22nd) ...": COMM may hold spaces
    # and parentheses, so split after its last ")".
    _, sep, rest = text.rpartition(")")
    fields = rest.split()
    if not sep or len(fields) < 20:
        return None
    try:
        return Proc(pid, int(fields[1]), int(fields[2]), int(fields[3]), fields[0], int(fields[19]))
    except ValueError:
        return None


def read(pid: int) -> Proc | None:
    """The process ``pid`` now (None: there is none, or it cannot be read)."""
    try:
        text = (_PROC / str(pid) / "stat").read_text(errors="replace")
    except OSError:
        return None
    return _parse(pid, text)


def table() -> dict[int, Proc]:
    """Every process on the machine, by pid (a snapshot: processes come and go)."""
    found: dict[int, Proc] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir(_PROC):
            if entry.name.isdigit() and (proc := read(int(entry.name))) is not None:
                found[proc.pid] = proc
    return found


def children(pid: int) -> list[int]:
    """The children of ``pid`` (of each of its threads), zombies included; [] if it is
    gone (or the kernel lists no children: see :data:`CHILDREN_LISTED`)."""
    found: list[int] = []
    try:
        tasks = os.listdir(_PROC / str(pid) / "task")
    except OSError:
        return found
    for task in tasks:
        with contextlib.suppress(OSError, ValueError):
            found += map(int, (_PROC / str(pid) / "task" / task / "children").read_text().split())
    return found


CHILDREN_LISTED = (_PROC / "self" / "task" / str(os.getpid()) / "children").exists()
"""Whether this kernel lists each task's children (``CONFIG_PROC_CHILDREN``, on in the
common distributions' kernels): :func:`subtree` needs it."""


def subtree(roots: Iterable[int]) -> dict[int, Proc]:
    """``roots`` and every descendant of them, by pid: a walk down their children, so it
    costs what they count, not what the machine runs (needs :data:`CHILDREN_LISTED`)."""
    found: dict[int, Proc] = {}
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in found or (proc := read(pid)) is None:
            continue
        found[pid] = proc
        todo += children(pid)
    return found


def environ_has(pid: int, entry: str) -> bool:
    """Whether ``NAME=VALUE`` ``entry`` is in the environment ``pid`` was started with
    (False if it cannot be read: another user's process, or a zombie's)."""
    try:
        data = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return False
    return b"\0" + entry.encode() + b"\0" in b"\0" + data + b"\0"


def send(proc: Proc, sig: signal.Signals) -> bool:
    """Send ``sig`` to ``proc`` if that very process still runs; whether it was sent."""
    pidfd_open = getattr(os, "pidfd_open", None)
    fd: int | None = None
    if pidfd_open is not None:
        try:
            fd = pidfd_open(proc.pid)
        except OSError:
            fd = None  # gone (ESRCH), or no pidfds here: checked below
    try:
        now = read(proc.pid)  # with a pidfd held, the pid cannot be reused meanwhile
        if now is None or now.start != proc.start or not now.running:
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if fd is not None:
                signal.pidfd_send_signal(fd, sig)
            else:
                os.kill(proc.pid, sig)
            return True
        return False
    finally:
        if fd is not None:
            os.close(fd)
