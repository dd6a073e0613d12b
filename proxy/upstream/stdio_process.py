"""Starting a stdio server's process, and the pipes it is talked to through (DESIGN.md
U1), for :class:`~proxy.upstream.stdio.StdioUpstream`.

The child runs in its own process group (``start_new_session``), dies with the proxy
(:func:`~proxy.upstream.deathsig.die_with_parent`), carries its lineage's tag in its
environment (:mod:`proxy.upstream.lineage`) and is asyncio's to reap from the fork on
(:data:`~proxy.upstream.subreaper.REAPER`).

Its stdin, its stderr and its exit are asyncio's subprocess transport's. Its stdout is a
pipe of our own, read by its own read transport (``loop.connect_read_pipe``) whose
protocol is the :class:`~proxy.upstream.stdio_reader.StdoutLines` (issue 23): asyncio's
subprocess transport hands each read of a child's pipe over in a later turn of the event
loop (a ``call_soon`` per read), one turn more for every answer from the server. The read
transport is set up before the fork, so that no process ever runs without an owner of
its stdout; it closes at the pipe's end, on a failed start, and when the process is
stopped (:meth:`~proxy.upstream.stdio.StdioUpstream._end_process`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from typing import Any

from proxy.config_rules import ConfigError
from proxy.core.errors import UpstreamStartFailed
from proxy.upstream.base import UpstreamContext
from proxy.upstream.deathsig import die_with_parent
from proxy.upstream.lineage import TAG_VARIABLE, Lineage
from proxy.upstream.stdio_reader import StdoutLines
from proxy.upstream.subreaper import REAPER


class _ExitWatchingProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Learns of the child's exit itself: asyncio's ``Process.wait()`` also waits for the
    pipes to close, which never happens while a grandchild holds them."""

    def __init__(self, exited: asyncio.Future[None], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._exited = exited

    def process_exited(self) -> None:
        super().process_exited()
        if not self._exited.done():
            self._exited.set_result(None)


@dataclass(eq=False)
class Child:
    """One running server process: its stdin and stderr (:attr:`proc`), its stdout pipe,
    the future its exit sets, its descendants."""

    proc: asyncio.subprocess.Process
    transport: asyncio.SubprocessTransport
    stdout: asyncio.ReadTransport
    exited: asyncio.Future[None]
    lineage: Lineage


async def start_child(context: UpstreamContext, stdout: StdoutLines) -> Child:
    """Start the server's process, its stdout read by ``stdout``; a failure to start is
    :class:`UpstreamStartFailed` (noted in the health if the command could not run)."""
    cfg = context.config
    try:
        command = cfg.resolved_command()  # ${NAME} from the environment, as at start
    except ConfigError as exc:
        raise UpstreamStartFailed(f"cannot start the MCP server: {exc}") from None
    env = dict(os.environ) if cfg.inherit_env else {}
    env.update(cfg.env)
    lineage = Lineage()  # its descendants, found to end with it
    env[TAG_VARIABLE] = lineage.tag
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()
    read_end, write_end = os.pipe()  # (neither inherited: only dup'ed to the child's 1)
    try:
        pipe, _ = await loop.connect_read_pipe(lambda: stdout, os.fdopen(read_end, "rb", 0))
    except BaseException:
        os.close(write_end)
        raise  # (the transport, once made, closed the read end)
    try:
        with REAPER.spawning():  # asyncio's child from the fork on: not reaped by us
            transport, protocol = await loop.subprocess_exec(
                lambda: _ExitWatchingProtocol(exited, limit=cfg.max_line_bytes, loop=loop),
                *command,
                stdin=asyncio.subprocess.PIPE,
                stdout=write_end,
                stderr=asyncio.subprocess.PIPE,
                cwd=cfg.cwd,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent(),  # dies with the proxy, even on SIGKILL
            )
            lineage.started(transport.get_pid())
    except BaseException as exc:
        pipe.close()
        if not isinstance(exc, OSError):
            raise
        error = f"cannot start {cfg.command[0]!r}: {exc.strerror or exc}"
        context.health.start_failed(error)
        raise UpstreamStartFailed(
            f"cannot start MCP server {cfg.command[0]!r}: {exc.strerror or exc}"
        ) from None
    finally:
        os.close(write_end)  # the child's own now: its exit (and its group's) is the EOF
    proc = asyncio.subprocess.Process(transport, protocol, loop)
    return Child(proc, transport, pipe, exited, lineage)


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to the process group ``pgid``, if it is still there."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
