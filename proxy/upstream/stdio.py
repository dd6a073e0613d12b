"""A stdio MCP server as a child process (DESIGN.md U1).

The child runs in its own process group (``start_new_session``) so that stopping it
reaches everything it spawned: SIGTERM to the group, SIGKILL after a grace; what left
the group (``setsid``, daemons) is ended alike (:mod:`proxy.upstream.lineage`). Messages are
newline-delimited JSON-RPC on stdin/stdout; stderr lines are logged with the session id;
a stdout line that is not JSON-RPC is logged and skipped.

A stdout line over ``upstream.max_line_bytes`` is skipped, exactly that line however it
arrives, holding no more of it at once than the reader's buffer (about the limit) plus
its first and last 64 KiB. When those two ends show a response whose ``id`` can be read
(:func:`outline`), the request gets a JSON-RPC error instead, so that nothing waits
forever: code -32000 (JSON-RPC 2.0 §5.1, the implementation-defined server-error range,
as for the other answers the proxy synthesizes for the upstream), message "the MCP
server's response is over upstream.max_line_bytes (N bytes)", ``data: {"reason":
"upstream_message_too_large", "limit": N}``. An over-long request from the server is
answered to the server with that same error (it must not wait forever either); an
over-long notification is only logged (``upstream_message_too_large``, size and limit,
never content).

The process and its pipes are set up by :mod:`proxy.upstream.stdio_process`; stdout is
read and cut into lines in its pipe's callbacks (:mod:`proxy.upstream.stdio_reader`).
An idle session's process may be stopped while the session stays, and started again by
its next message (``upstream.stop_idle_seconds``, :mod:`proxy.upstream.stdio_idle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from typing import Any

import structlog

from proxy.core import jsonrpc
from proxy.core.errors import ProxyError, UpstreamStartFailed
from proxy.core.handshake import HandshakeStep
from proxy.core.jsonrpc import Message
from proxy.upstream.base import UpstreamContext
from proxy.upstream.handshake import ClientHandshake, initialize
from proxy.upstream.lineage import Lineage
from proxy.upstream.respawn import Respawns
from proxy.upstream.stdio_idle import IdleStop
from proxy.upstream.stdio_process import Child, signal_group, start_child
from proxy.upstream.stdio_reader import StdoutLines, StdoutReader

log = structlog.get_logger("proxy.upstream.stdio")

_DRAIN_SECONDS = 1.0
_REINIT_ID = "mcp-resume-proxy/restart/"  # the session's own ids upstream are ints
_REINIT_SECONDS = 30.0


class StdioUpstream(IdleStop, StdoutReader):
    """Owns one child process and the tasks that read and write its pipes."""

    def __init__(self, context: UpstreamContext) -> None:
        self._context = context
        self._proc: asyncio.subprocess.Process | None = None
        self._outbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._tasks: list[asyncio.Task[Any]] = []
        self._stopping = False
        self._closed_reported = False
        self._queued_bytes = 0  # in the outbox (see pending_bytes)
        self._paused = False  # overflow: block holds the server back
        self._stdout: StdoutLines | None = None  # the current process's
        self._exited: asyncio.Future[None]
        self._watcher: asyncio.Task[None]
        self._writer: asyncio.Task[None] | None = None
        self._child: Child | None = None  # the current process's pipes
        # Respawn (upstream.restart): the client's handshake, as the core marked it (the
        # session got past it once initialized is sent); exits counted for the crash loop.
        self._handshake = ClientHandshake()
        self._respawns = Respawns(context.config)
        self._respawner: asyncio.Task[None] | None = None
        self._reinit: tuple[str, asyncio.Future[Message]] | None = None
        self._reinits = 0  # the proxy's own initialize requests: each gets its own id
        self._lineage: Lineage | None = None
        IdleStop.__init__(self)  # upstream.stop_idle_seconds: stopped while the session stays

    @property
    def pending_bytes(self) -> int:
        """Queued for stdin, not yet taken by the child: the outbox and the pipe's buffer."""
        stdin = self._proc.stdin if self._proc is not None else None
        buffered = stdin.transport.get_write_buffer_size() if stdin is not None else 0
        return self._queued_bytes + buffered

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc and not self._asleep else None

    def describe(self) -> str:
        return " ".join(self._context.config.command)

    async def start(self) -> None:
        health = self._context.health
        wait = health.not_before - time.monotonic()
        if wait > 0:  # it failed to start just now: not again for every client at once
            raise UpstreamStartFailed(
                f"the MCP server failed to start ({health.last_error}); "
                f"not tried again for {wait:.1f} s"
            )
        await self._spawn()
        self._writer = asyncio.create_task(self._write_stdin(), name=f"stdin-{self._context.label}")
        self._tasks.append(self._writer)

    async def _spawn(self) -> None:
        stdout = self._new_stdout(self._context.config.max_line_bytes)
        child = await start_child(self._context, stdout)
        # Its lineage and exit are this upstream's only once it runs: a launch cancelled
        # (a stop during a restart) leaves the last process's, which a stop can end, and
        # never an exit that no process will ever set.
        self._child, self._proc = child, child.proc
        self._lineage, self._exited = child.lineage, child.exited
        log.info("upstream_started", session=self._context.label, pid=child.proc.pid)
        self._context.health.ok()
        name = self._context.label
        self._stdout = stdout
        self._tasks = [t for t in self._tasks if not t.done()] + [
            asyncio.create_task(self._read_stderr(), name=f"stderr-{name}"),
        ]
        self._watcher = asyncio.create_task(
            self._watch_exit(child.lineage, stdout), name=f"exit-{name}"
        )

    def pause(self) -> None:
        """Stop reading stdout; the child blocks once the pipe is full."""
        self._paused = True
        if self._stdout is not None:
            self._stdout.pause()

    def resume(self) -> None:
        self._paused = False
        if self._stdout is not None:
            self._stdout.resume()

    def send(self, payload: bytes, handshake: HandshakeStep | None = None) -> None:
        """Queue one message for the child's stdin (order is kept). The client's
        initialize is kept (a restarted server gets it again) and the session seen through
        it (a server that exits before is not restarted)."""
        if handshake is not None and not self._ready:
            self._handshake.sent(handshake, payload)
        if self._stopping:
            return
        stdin = self._direct_stdin()
        if stdin is not None:
            stdin.write(payload + b"\n")
            return
        self._queued_bytes += len(payload) + 1
        self._outbox.put_nowait(payload)
        self._wake_for_message()

    def _direct_stdin(self) -> asyncio.StreamWriter | None:
        """The child's stdin when a message may be written to it at once, with no hand-off
        to the writer task (one task wake-up less per message): the writer waits for work
        (an empty outbox: whatever it took is in the pipe already, so order is kept), is
        not being stopped (a restart, an idle stop), and the pipe holds nothing back."""
        writer = self._writer
        if (
            writer is None
            or writer.done()
            or writer.cancelling()
            or self._idle_stop is not None
            or not self._outbox.empty()
            or self._proc is None
        ):
            return None
        stdin = self._proc.stdin
        if stdin is None or stdin.transport.is_closing():
            return None
        return stdin if stdin.transport.get_write_buffer_size() == 0 else None

    @property
    def _ready(self) -> bool:
        """The client's session got through initialize (initialized was sent after it)."""
        return self._handshake.initialized

    async def _write_stdin(self) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        stdin = self._proc.stdin
        while True:
            payload = await self._outbox.get()
            if payload is None:
                break
            # Write everything already queued in one go: fewer syscalls under load.
            chunks = [payload, b"\n"]
            while not self._outbox.empty():
                more = self._outbox.get_nowait()
                if more is None:
                    self._outbox.put_nowait(None)
                    break
                chunks += (more, b"\n")
            data = b"".join(chunks)
            self._queued_bytes -= len(data)  # (in the pipe's buffer until taken)
            try:
                stdin.write(data)
                await stdin.drain()
            except (ConnectionError, BrokenPipeError):
                break
        with contextlib.suppress(Exception):
            stdin.close()

    async def _watch_exit(self, lineage: Lineage, stdout: StdoutLines) -> None:
        """When the child exits: take what it wrote last, end its group, report."""
        assert self._proc is not None
        await self._exited
        lineage.reaped()
        with contextlib.suppress(TimeoutError):
            # Lines written just before the exit are still in the pipe: read them first,
            # but do not wait on a pipe that a surviving grandchild keeps open.
            await asyncio.wait_for(asyncio.shield(stdout.done), _DRAIN_SECONDS)
        reason = f"exited with code {self._proc.returncode}"
        if self._idle_stopping:
            return  # stopped for idleness: the session goes on (see stop_idle)
        if not self._stopping:
            # A crashed server's children must not outlive it, in its group or not.
            signal_group(self._proc.pid, signal.SIGKILL)
            await lineage.end(0)
            if not self._ready:  # it never got through initialize: a failed start
                self._context.health.start_failed(f"MCP server {reason} before initialize")
            elif self._respawner is not None and not self._respawner.done():
                return  # a restarted server that died again: the respawn loop sees it
            elif self._may_respawn():
                self._respawner = asyncio.create_task(self._respawn(reason))
                return
        self._report_closed(reason)

    def _may_respawn(self) -> bool:
        return (
            self._context.config.restart
            and self._context.on_restarted is not None
            and self._handshake.request is not None
        )

    async def _respawn(self, reason: str, *, woken: bool = False) -> None:
        """Start the server again for this session, re-initialized with the client's own
        ``initialize``; give up on a crash loop. What was in flight gets errors first.

        ``woken``: the process was stopped for idleness, not lost: the first start is at
        once and nothing in flight fails; a failed start is then an exit like any other."""
        writer = self._writer
        if writer is not None:  # it holds the dead stdin; queued messages wait for the new
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
        health = self._context.health
        on_restarted = self._context.on_restarted
        assert on_restarted is not None
        while not self._stopping:
            if not woken:
                loop = self._respawns.exited(reason)
                if loop is not None:
                    health.crash_looping(loop, self._context.config.restart_window_seconds)
                    log.error("upstream_crash_loop", session=self._context.label, reason=loop)
                    self._report_closed(loop)
                    return
                health.restarts += 1
                on_restarted(reason)
                await asyncio.sleep(self._respawns.delay())
                if self._stopping:
                    return
            try:
                await self._spawn()
                await self._reinitialize()
            except (ProxyError, OSError) as exc:
                reason = str(exc)
                log.warning("upstream_restart_failed", session=self._context.label, error=reason)
                if self._proc is not None and self._proc.returncode is None:
                    signal_group(self._proc.pid, signal.SIGKILL)
                    await asyncio.shield(self._exited)
                if woken and not self._may_respawn():  # upstream.restart: false
                    self._report_closed(reason)
                    return
                woken = False
                continue
            event = "upstream_idle_restarted" if woken else "upstream_restarted"
            log.info(event, session=self._context.label, pid=self.pid)
            self._writer = asyncio.create_task(
                self._write_stdin(), name=f"stdin-{self._context.label}"
            )
            self._tasks.append(self._writer)
            self._context.health.started()
            return

    async def _reinitialize(self) -> None:
        """The client's own initialize params (under the proxy's own id), its answer taken
        here, then ``notifications/initialized``: written before anything queued for the
        server (the one driver, :func:`proxy.upstream.handshake.initialize`)."""
        assert self._handshake.request is not None
        params = self._handshake.params
        await initialize(self._ask_restarted, self._write_now, params, _REINIT_SECONDS)

    async def _ask_restarted(self, method: str, params: dict[str, Any], timeout: float) -> Message:
        """A request of the proxy's own to the restarted server; its answer is kept here."""
        self._reinits += 1
        request_id = f"{_REINIT_ID}{self._reinits}"
        answer: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self._reinit = (request_id, answer)
        try:
            request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
            await self._write_now(request)
            waiting: list[asyncio.Future[Any]] = [answer, self._exited]
            done, _ = await asyncio.wait(waiting, timeout=timeout, return_when="FIRST_COMPLETED")
            if answer not in done:
                raise UpstreamStartFailed(f"the restarted MCP server did not answer {method}")
            return answer.result()
        finally:
            self._reinit = None

    async def _write_now(self, message: dict[str, Any]) -> None:
        """Write to the restarted server's stdin ahead of anything queued for it."""
        assert self._proc is not None and self._proc.stdin is not None
        stdin = self._proc.stdin
        try:
            stdin.write(jsonrpc.encode(message) + b"\n")
            await stdin.drain()
        except (ConnectionError, BrokenPipeError) as exc:
            raise UpstreamStartFailed(f"the restarted MCP server went away: {exc}") from None

    def _report_closed(self, reason: str) -> None:
        if self._closed_reported:
            return
        self._closed_reported = True
        if self._stopping:
            log.info("upstream_stopped", session=self._context.label, reason=reason)
        else:
            log.warning("upstream_exited", session=self._context.label, reason=reason)
            self._context.health.failing(f"MCP server {reason}")
        self._context.on_closed(reason)

    # ------------------------------------------------------------------ stop
    async def stop(self) -> None:
        """Stop the child's whole process group: TERM, then KILL after the grace."""
        self._stopping = True
        if self._idle_stop is not None:
            await asyncio.shield(self._idle_stop)
        if self._respawner is not None and not self._respawner.done():
            self._respawner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._respawner
        proc, lineage = self._proc, self._lineage
        if proc is None or lineage is None or self._asleep:
            return
        await asyncio.to_thread(lineage.scan)  # its tree, before the leader's exit breaks it
        self._outbox.put_nowait(None)  # the writer closes stdin: the polite request
        await self._end_process(proc, lineage)

    async def _end_process(self, proc: asyncio.subprocess.Process, lineage: Lineage) -> None:
        """Its stdin is closed (or being closed): wait, TERM, wait the grace, KILL, reap."""
        grace = self._context.config.stop_grace_seconds
        exited = self._exited
        # MCP stdio §Shutdown: close stdin, then SIGTERM, then SIGKILL.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(exited), min(0.5, grace / 2))
        if not exited.done():
            signal_group(proc.pid, signal.SIGTERM)
            lineage.terminate()  # one grace for all: those that left the group too
            try:
                await asyncio.wait_for(asyncio.shield(exited), grace)
            except TimeoutError:
                log.warning("upstream_kill", session=self._context.label, pid=proc.pid)
        # The group may hold grandchildren even when the leader is gone; others left it.
        signal_group(proc.pid, signal.SIGKILL)
        await lineage.end(grace)
        await asyncio.shield(exited)
        await asyncio.shield(self._watcher)
        try:
            await asyncio.wait_for(proc.wait(), _DRAIN_SECONDS)
        except TimeoutError:
            # Something that left the group still holds a pipe: let go of ours.
            if self._child is not None:
                self._child.transport.close()
        if self._child is not None:  # (its stdout ended, or something that left holds it)
            self._child.stdout.close()
        if self._stdout is not None:
            self._stdout.close()  # (as a reader task cancelled: nothing more handed over)
        for task in self._tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
