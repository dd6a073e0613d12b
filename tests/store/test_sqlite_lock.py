"""The SQLite file's lock in one process (proxy/store/sqlite_lock.py): a second opener is
refused before it reads anything, and the lock goes with :meth:`SqliteStore.close`.
Across processes (exit 2, SIGKILL): tests/test_store_lock.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from proxy.store.base import StoreLimits
from proxy.store.sqlite import SqliteStore
from proxy.store.sqlite_lock import StoreInUse, lock_path_of, lock_store_file


async def test_a_second_store_on_the_file_is_refused_until_the_first_closes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    first = SqliteStore(path, StoreLimits())
    await first.open()
    try:
        assert lock_path_of(path).read_text() == f"{os.getpid()}\n"
        second = SqliteStore(path, StoreLimits())
        with pytest.raises(StoreInUse) as caught:
            await second.open()
        assert caught.value.holder == os.getpid()
        assert str(caught.value) == (
            f"store.path {path} is in use by another proxy (pid {os.getpid()}); "
            "one proxy per SQLite file"
        )
        await second.close()  # refused: nothing to close, and the first's lock stays
        with pytest.raises(StoreInUse):
            lock_store_file(path)
    finally:
        await first.close()
    third = SqliteStore(path, StoreLimits())
    await third.open()
    await third.close()


async def test_a_refused_opener_reads_nothing(tmp_path: Path) -> None:
    """The lock is taken first: a database that is not one is never looked at."""
    path = tmp_path / "notes.txt"
    held = lock_store_file(path)
    try:
        with pytest.raises(StoreInUse):
            await SqliteStore(path, StoreLimits()).open()
        assert not path.exists()  # nothing made, nothing read
    finally:
        held.release()
    assert not held.held


def test_a_holder_that_has_not_written_its_pid_is_named_unknown(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    held = lock_store_file(path)
    try:
        lock_path_of(path).write_text("")
        with pytest.raises(StoreInUse, match=r"\(pid unknown\)"):
            lock_store_file(path)
    finally:
        held.release()
