"""One proxy per SQLite file, enforced: an OS lock beside the database (issue 19 item 5).

Two proxies on one file corrupt its history: the second ends the first's live streams as
orphans (``proxy_restarted``) while the first goes on appending to them. So before
anything reads or writes the database, :func:`lock_store_file` takes an exclusive,
non-blocking ``flock(2)`` on ``<path>.lock`` and writes the holder's pid into it. A second
opener fails at once with :class:`StoreInUse`, naming the file and the holder's pid, and
has touched neither the database nor a port (the store opens before the port is bound).

``flock`` rather than ``fcntl``/``lockf`` record locks: a record lock is the process's
and goes away when the process closes *any* descriptor of the file, and it does not
conflict between two openers in one process. An ``flock`` belongs to the open file
description: it holds until that descriptor is closed, by :meth:`StoreLock.release` or by
the kernel when the process ends in any way (SIGKILL and crashes included), so a restart
after a crash never finds a stale lock. The descriptor is not inherited by server
processes (Python's descriptors are close-on-exec), so a surviving child never holds it.

A separate lock file, not the database itself: SQLite takes ``fcntl`` locks on the
database and its WAL, which must not be disturbed. Locks are advisory and local: a second
machine on a network file system is not necessarily kept out (nor should SQLite's WAL be
used there).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from proxy.store.base import StoreError


class StoreInUse(StoreError):
    """Another process holds the SQLite file's lock: this proxy must not start on it."""

    def __init__(self, path: Path, holder: int | None) -> None:
        self.path = path
        self.holder = holder
        pid = f"pid {holder}" if holder is not None else "pid unknown"
        super().__init__(
            f"store.path {path} is in use by another proxy ({pid}); one proxy per SQLite file"
        )


def lock_path_of(path: Path) -> Path:
    """The lock file of the database at ``path``: ``<path>.lock`` beside it."""
    return path.with_name(path.name + ".lock")


class StoreLock:
    """The held lock of one SQLite file; :meth:`release` (or the end of the process)
    lets it go."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Let the lock go. The pid stays in the file: it is read only while locked."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the descriptor releases the flock


def _holder(fd: int) -> int | None:
    """The pid written in a lock file someone else holds (None: not written yet)."""
    with contextlib.suppress(OSError, ValueError):
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        return int(text) if text else None
    return None


def lock_store_file(path: Path) -> StoreLock:
    """Take the lock of the database at ``path`` or raise :class:`StoreInUse`.

    A missing directory is refused (and not made), as the database itself would.
    """
    lock_path = lock_path_of(path)
    if not path.parent.is_dir():
        raise StoreError(
            f"cannot open the sqlite store {path}: the directory {path.parent} does not exist"
        )
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StoreError(f"cannot open the lock file {lock_path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise StoreInUse(path, holder) from None
    except OSError as exc:
        os.close(fd)
        raise StoreError(f"cannot lock {lock_path}: {exc.strerror}") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise StoreError(f"cannot write the lock file {lock_path}: {exc.strerror}") from None
    return StoreLock(lock_path, fd)
