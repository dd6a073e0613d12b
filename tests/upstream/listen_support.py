"""Servers the standalone ``GET`` tests (``test_http_listen.py``) run against, beside the
scripted server: a raw asyncio front that answers every ``GET`` with a garbled response
head and passes every other request through to the scripted server
(:class:`GarbledGets`), and a self-signed certificate for an https server
(:func:`self_signed`)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
from collections.abc import AsyncIterator
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

_CHUNK = 64 * 1024


class GarbledGets:
    """A TCP front on a free 127.0.0.1 port: a connection whose first request is a
    ``GET`` is answered with ``head`` (then left open until the client goes, or closed
    with ``close_after``); any other connection is piped to ``target_port`` both ways."""

    def __init__(self, target_port: int, head: bytes, *, close_after: bool = False) -> None:
        self._target = target_port
        self._head = head
        self._close_after = close_after
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._clients: set[asyncio.StreamWriter] = set()
        self.gets = 0  # GETs answered with the garbled head
        self.port = 0

    def url(self, path: str = "/mcp") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening, end every connection, and wait until each handler is done (it
        ends with its connection: none is cancelled, which asyncio's streams would log)."""
        if self._server is not None:
            self._server.close()
        for client in list(self._clients):
            client.transport.abort()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._clients.add(writer)
        try:
            first = await reader.read(_CHUNK)
            if first.startswith(b"GET "):
                self.gets += 1
                writer.write(self._head)
                await writer.drain()
                if not self._close_after:
                    await reader.read()  # until the client hangs up
            elif first:
                await self._pipe(first, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self._handlers.discard(task)
            self._clients.discard(writer)

    async def _pipe(
        self, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._target)
        try:
            up_writer.write(first)

            async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
                while chunk := await src.read(_CHUNK):
                    dst.write(chunk)
                    await dst.drain()

            tasks = [
                asyncio.create_task(copy(reader, up_writer)),
                asyncio.create_task(copy(up_reader, writer)),
            ]
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            up_writer.close()
            with contextlib.suppress(ConnectionError):
                await up_writer.wait_closed()


@contextlib.asynccontextmanager
async def garbled_gets(
    target_port: int, head: bytes, *, close_after: bool = False
) -> AsyncIterator[GarbledGets]:
    front = GarbledGets(target_port, head, close_after=close_after)
    await front.start()
    try:
        yield front
    finally:
        await front.stop()


def self_signed(workdir: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (the certificate is its own CA)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = workdir / "cert.pem", workdir / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path
