"""The host side of the stdio shim: newline-delimited JSON-RPC on stdin and stdout.

MCP 2025-11-25 basic/transports §stdio: messages are delimited by newlines and contain
none; the server writes nothing to stdout that is not an MCP message (logs go to stderr).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from collections.abc import AsyncIterator
from typing import BinaryIO

import structlog

log = structlog.get_logger("proxy.shim")

# A host message longer than this is refused (an error to the host) rather than buffered.
MAX_LINE_BYTES = 16 * 1024 * 1024
_READ_CHUNK = 64 * 1024
_FLUSH_SECONDS = 2.0


class HostPipe:
    """Reads lines from the host (stdin) and writes lines to it (stdout).

    Pipes and character devices are read and written through asyncio; a regular file
    (``shim < requests.jsonl``) is read in small blocking reads, which never wait.
    """

    def __init__(self, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
        self._stdin = stdin if stdin is not None else sys.stdin.buffer
        self._stdout = stdout if stdout is not None else sys.stdout.buffer
        self._reader: asyncio.StreamReader | None = None
        self._read_transport: asyncio.ReadTransport | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.too_long = 0  # host lines refused for their size

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        if not _is_regular(self._stdin):
            reader = asyncio.StreamReader(limit=MAX_LINE_BYTES, loop=loop)
            protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
            self._read_transport, _ = await loop.connect_read_pipe(lambda: protocol, self._stdin)
            self._reader = reader
        if not _is_regular(self._stdout):
            transport, wprotocol = await loop.connect_write_pipe(
                asyncio.streams.FlowControlMixin, self._stdout
            )
            self._writer = asyncio.StreamWriter(transport, wprotocol, None, loop)

    async def _chunks(self) -> AsyncIterator[bytes]:
        if self._reader is not None:
            while chunk := await self._reader.read(_READ_CHUNK):
                yield chunk
        else:
            while chunk := self._stdin.read(_READ_CHUNK):
                yield chunk

    async def lines(self) -> AsyncIterator[bytes | None]:
        """Each non-blank line without its newline; None for a line over MAX_LINE_BYTES
        (its bytes are skipped up to the next newline). Ends at EOF."""
        buffer = bytearray()
        skipping = False
        async for chunk in self._chunks():
            buffer += chunk
            while True:
                newline = buffer.find(b"\n")
                if newline < 0:
                    break
                line = bytes(buffer[:newline]).rstrip(b"\r")
                del buffer[: newline + 1]
                if skipping:
                    skipping = False
                    continue
                if line.strip():
                    yield line
            if len(buffer) > MAX_LINE_BYTES:
                buffer.clear()
                if not skipping:
                    skipping = True
                    self.too_long += 1
                    yield None
        if buffer.strip() and not skipping:
            yield bytes(buffer)  # a last line without its newline

    def write(self, line: bytes) -> None:
        """Write one message line (``line`` has no newline of its own)."""
        if self._writer is not None:
            if not self._writer.is_closing():
                self._writer.write(line + b"\n")
            return
        try:
            self._stdout.write(line + b"\n")
            self._stdout.flush()
        except (OSError, ValueError) as exc:
            log.warning("host_write_failed", error=str(exc))

    async def drain(self) -> None:
        """Wait while the host is not reading (backpressure); a gone host is not an error."""
        if self._writer is not None:
            with contextlib.suppress(ConnectionError):
                await self._writer.drain()

    async def close(self) -> None:
        if self._read_transport is not None:
            self._read_transport.close()
        if self._writer is not None:
            with contextlib.suppress(ConnectionError, TimeoutError):
                await asyncio.wait_for(self._writer.drain(), _FLUSH_SECONDS)
            self._writer.close()  # (a bare pipe protocol has no close waiter to await)


def _is_regular(stream: BinaryIO) -> bool:
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError):
        return True  # no file descriptor (a test's BytesIO): plain blocking calls
