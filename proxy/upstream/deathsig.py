"""Child processes die with the proxy, also when it is killed with SIGKILL (Linux).

Each stdio server is started with ``PR_SET_PDEATHSIG`` = SIGKILL (prctl(2)), set in the
child between fork and exec: when the proxy's main thread (the event loop's, which
starts every child) ends, for any reason, the kernel kills the child. A child that finds
its parent already gone right after setting it exits at once (the fork/prctl race).

The signal reaches the direct child only. What that child started itself shares the
proxy's stdin pipe, which closes with the proxy: stdio MCP servers end on that EOF. A
daemon (``setsid``, orphaned) is ended by :mod:`proxy.upstream.lineage` on every stop of
its server or of the proxy, but not on SIGKILL of the proxy: it then goes to init.
Elsewhere than Linux there is no such call and this does nothing (logged once).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def load_prctl() -> Callable[..., int] | None:
    """libc's ``prctl(option, arg2, arg3, arg4, arg5)`` (None: not Linux, or not found)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_PRCTL = load_prctl()
AVAILABLE = _PRCTL is not None


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that ties the child's life to this process (None off Linux).

    It makes one system call and reads one value, nothing that takes a lock another
    thread of the parent (the SQLite store's) might have held at fork time.
    """
    prctl = _PRCTL
    if prctl is None:
        return None
    parent = os.getpid()
    kill = int(signal.SIGKILL)

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return preexec
