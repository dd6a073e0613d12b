"""A stdio MCP server as a child process (DESIGN.md U1).

The child runs in its own process group (``start_new_session``) so that stopping it
reaches everything it spawned: SIGTERM to the group, SIGKILL after a grace. Messages are
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
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

import structlog

from proxy.core import jsonrpc
from proxy.core.errors import ProxyError, UpstreamStartFailed
from proxy.core.protocol import SERVER_ERROR
from proxy.upstream.base import UpstreamContext, messages_of
from proxy.upstream.deathsig import die_with_parent
from proxy.upstream.overlong import OverlongLine, outline, read_line

_LINES_PER_TURN = 256
"""Lines read from a server's stdout before the reader lets the event loop turn."""
log = structlog.get_logger("proxy.upstream.stdio")

_DRAIN_SECONDS = 1.0


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


class StdioUpstream:
    """Owns one child process and the tasks that read and write its pipes."""

    def __init__(self, context: UpstreamContext) -> None:
        self._context = context
        self._proc: asyncio.subprocess.Process | None = None
        self._outbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._tasks: list[asyncio.Task[Any]] = []
        self._stopping = False
        self._closed_reported = False
        self.pending_bytes = 0  # queued for stdin, not yet taken by the child
        self._readable = asyncio.Event()  # cleared: overflow: block holds the server back
        self._readable.set()
        self._exited: asyncio.Future[None]
        self._watcher: asyncio.Task[None]
        self._reader: asyncio.Task[None]
        self._transport: asyncio.SubprocessTransport

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def describe(self) -> str:
        return " ".join(self._context.config.command)

    async def start(self) -> None:
        cfg = self._context.config
        env = dict(os.environ) if cfg.inherit_env else {}
        env.update(cfg.env)
        loop = asyncio.get_running_loop()
        exited = self._exited = loop.create_future()

        try:
            transport, protocol = await loop.subprocess_exec(
                lambda: _ExitWatchingProtocol(exited, limit=cfg.max_line_bytes, loop=loop),
                *cfg.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cfg.cwd,
                env=env,
                start_new_session=True,
                preexec_fn=die_with_parent(),  # dies with the proxy, even on SIGKILL
            )
        except OSError as exc:
            self._context.health.failing(f"cannot start {cfg.command[0]!r}: {exc.strerror or exc}")
            raise UpstreamStartFailed(
                f"cannot start MCP server {cfg.command[0]!r}: {exc.strerror or exc}"
            ) from None
        self._transport = transport
        self._proc = asyncio.subprocess.Process(transport, protocol, loop)
        log.info("upstream_started", session=self._context.label, pid=self._proc.pid)
        self._context.health.ok()
        name = self._context.label
        self._reader = asyncio.create_task(self._read_stdout(), name=f"stdout-{name}")
        self._tasks = [
            self._reader,
            asyncio.create_task(self._read_stderr(), name=f"stderr-{name}"),
            asyncio.create_task(self._write_stdin(), name=f"stdin-{name}"),
        ]
        self._watcher = asyncio.create_task(self._watch_exit(), name=f"exit-{name}")

    def pause(self) -> None:
        """Stop reading stdout; the child blocks once the pipe is full."""
        self._readable.clear()

    def resume(self) -> None:
        self._readable.set()

    def send(self, payload: bytes) -> None:
        """Queue one message for the child's stdin (order is kept)."""
        if not self._stopping:
            self.pending_bytes += len(payload) + 1
            self._outbox.put_nowait(payload)

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
            try:
                stdin.write(data)
                await stdin.drain()
            except (ConnectionError, BrokenPipeError):
                break
            self.pending_bytes -= len(data)
        with contextlib.suppress(Exception):
            stdin.close()

    async def _read_stdout(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        stdout = self._proc.stdout
        lines = 0
        while True:
            lines += 1
            if lines % _LINES_PER_TURN == 0:
                # A pipe full of lines is read without ever suspending: let the loop turn,
                # so that other sessions, the store's group commit and the writers get on.
                await asyncio.sleep(0)
            await self._readable.wait()
            line = await read_line(stdout)
            if line is None:
                break
            if isinstance(line, OverlongLine):
                self._overlong(line)
                continue
            line = line.strip()
            if not line:
                continue
            for msg in messages_of(line, self._skipped):
                self._context.on_message(msg, None)

    async def _watch_exit(self) -> None:
        """When the child exits: take what it wrote last, end its group, report."""
        assert self._proc is not None
        await self._exited
        with contextlib.suppress(TimeoutError):
            # Lines written just before the exit are still in the pipe: read them first,
            # but do not wait on a pipe that a surviving grandchild keeps open.
            await asyncio.wait_for(asyncio.shield(self._reader), _DRAIN_SECONDS)
        if not self._stopping:
            # A crashed server's children must not outlive it.
            self._signal_group(self._proc.pid, signal.SIGKILL)
        self._report_closed(f"exited with code {self._proc.returncode}")

    def _overlong(self, line: OverlongLine) -> None:
        """Answer an over-long line's sender so that nobody waits forever.

        A response: its request (ours) gets an error naming the limit. A request from the
        server: the server gets an error response for it, on stdin. Ids are never mixed:
        each answer goes back to whoever sent the message. A notification is only logged.
        """
        limit = self._context.config.max_line_bytes
        shape = outline(line.head, line.tail)
        log.warning(
            "upstream_message_too_large",
            session=self._context.label,
            size=line.size,
            limit=limit,
            kind=shape.kind,
            answered=shape.id is not None and shape.kind in ("response", "request"),
        )
        if shape.id is None:
            return
        data = {"reason": "upstream_message_too_large", "limit": limit}
        if shape.kind == "response":
            message = f"the MCP server's response is over upstream.max_line_bytes ({limit} bytes)"
            error = jsonrpc.error_response(shape.id, SERVER_ERROR, message, data)
            self._context.on_message(jsonrpc.classify(error), None)
        elif shape.kind == "request":
            message = f"the request is over the proxy's upstream.max_line_bytes ({limit} bytes)"
            error = jsonrpc.error_response(shape.id, SERVER_ERROR, message, data)
            self.send(jsonrpc.encode(error))

    def _skipped(self, line: bytes | str, exc: ProxyError) -> None:
        log.warning(
            "upstream_line_skipped",
            session=self._context.label,
            error=exc.message,
            line=line[:200] if isinstance(line, str) else line[:200].decode(errors="replace"),
        )

    async def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        stderr = self._proc.stderr
        while True:
            try:
                line = await stderr.readline()
            except ValueError:
                continue
            if not line:
                return
            log.info(
                "upstream_stderr",
                session=self._context.label,
                line=line.rstrip().decode(errors="replace"),
            )

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

    async def stop(self) -> None:
        """Stop the child's whole process group: TERM, then KILL after the grace."""
        self._stopping = True
        proc = self._proc
        if proc is None:
            return
        self._outbox.put_nowait(None)  # the writer closes stdin: the polite request
        grace = self._context.config.stop_grace_seconds
        exited = self._exited
        # MCP stdio §Shutdown: close stdin, then SIGTERM, then SIGKILL.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(exited), min(0.5, grace / 2))
        if not exited.done():
            self._signal_group(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(exited), grace)
            except TimeoutError:
                log.warning("upstream_kill", session=self._context.label, pid=proc.pid)
        # The group may hold grandchildren even when the leader is gone.
        self._signal_group(proc.pid, signal.SIGKILL)
        await asyncio.shield(exited)
        await asyncio.shield(self._watcher)
        try:
            await asyncio.wait_for(proc.wait(), _DRAIN_SECONDS)
        except TimeoutError:
            # Something that left the group still holds a pipe: let go of ours.
            self._transport.close()
        for task in self._tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @staticmethod
    def _signal_group(pgid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
