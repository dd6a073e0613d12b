"""Reading /proc and ending a process tree in-process (proxy/upstream/proctable.py,
lineage.py), without the proxy adopting anything: a descendant in its own session is
still found through its parent; a signal never reaches a pid that changed hands.
The whole proxy with daemons: tests/upstream/test_lineage.py."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
from collections.abc import Iterator

from proxy.upstream import proctable
from proxy.upstream.lineage import Lineage
from tests.support import alive, eventually


def test_a_name_with_spaces_and_parentheses_is_read_whole() -> None:
    fields = "S 10 11 12 0 -1 4194304 " + " ".join(["0"] * 12) + " 777 rest"
    proc = proctable._parse(42, f"42 (a) b (c) {fields}")
    assert proc == proctable.Proc(42, 10, 11, 12, "S", 777)
    assert proctable._parse(42, "42 (truncated") is None


def test_a_signal_is_not_sent_to_a_pid_that_names_another_process() -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        now = proctable.read(sleeper.pid)
        assert now is not None and now.running and now.ppid == os.getpid()
        stranger = dataclasses.replace(now, start=now.start + 1)  # as if the pid were reused
        assert not proctable.send(stranger, signal.SIGKILL)
        assert sleeper.poll() is None
        assert proctable.send(now, signal.SIGKILL)
        assert sleeper.wait(10) == -signal.SIGKILL
        assert not proctable.send(now, signal.SIGKILL)  # gone: nothing to send to
    finally:
        sleeper.kill()
        sleeper.wait()


@contextlib.contextmanager
def server_with_a_daemon() -> Iterator[tuple[Lineage, subprocess.Popen[bytes], int]]:
    """sh (the "server", a group and session leader) -> sleep, in a new session."""
    server = subprocess.Popen(
        ["sh", "-c", "setsid sleep 60 & echo $!; wait"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    lineage = Lineage()
    try:
        lineage.started(server.pid)
        assert server.stdout is not None
        yield lineage, server, int(server.stdout.readline())
    finally:
        server.kill()
        server.wait()
        lineage.reaped()


async def test_a_descendant_in_a_session_of_its_own_ends_with_the_lineage() -> None:
    with server_with_a_daemon() as (lineage, server, daemon):
        await eventually(lambda: (p := proctable.read(daemon)) is not None and p.sid == daemon)
        assert [p.pid for p in lineage.scan()] == [daemon]
        if proctable.CHILDREN_LISTED:  # the walk the adopting proxy makes finds it too
            assert set(proctable.subtree([server.pid])) == {server.pid, daemon}
        assert await lineage.end(0) == 1
        assert not alive(daemon)
        server.wait(10)  # its ``wait`` returned: the daemon is gone


async def test_terminate_sends_sigterm_to_what_was_seen_with_the_group() -> None:
    with server_with_a_daemon() as (lineage, _, daemon):
        await eventually(lambda: (p := proctable.read(daemon)) is not None and p.sid == daemon)
        lineage.scan()
        lineage.terminate()  # sleep ends on SIGTERM: nothing is left for end()
        await eventually(lambda: not alive(daemon))
        assert await lineage.end(60) == 0
