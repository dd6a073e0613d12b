"""Fixtures for the end-to-end tests: the server under test as a real subprocess.

The default target is the proxy (``mcp-resume-proxy --config FILE.yaml``) in front of
``tests/fixtures/legacy_server.py``. ``MCP_E2E_TARGET=sdk`` runs the same tests against the
SDK's own resumable Streamable HTTP server (``sdk_reference_server.py``), which is how the
tests themselves were checked. A test module can also override the ``launcher`` fixture.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from .servers import LAUNCHERS, Launcher, RunningServer, ServerFactory

TARGET_ENV = "MCP_E2E_TARGET"


@pytest.fixture
def e2e_target() -> str:
    """``proxy`` (default) or ``sdk``, from the ``MCP_E2E_TARGET`` environment variable."""
    target = os.environ.get(TARGET_ENV, "proxy")
    if target not in LAUNCHERS:
        pytest.fail(f"{TARGET_ENV}={target!r}; expected one of {sorted(LAUNCHERS)}")
    return target


@pytest.fixture
def launcher(e2e_target: str) -> Launcher:
    """How a server is started; override this fixture to test something else."""
    return LAUNCHERS[e2e_target]


@pytest.fixture
def server_factory(launcher: Launcher, tmp_path: Path) -> Iterator[ServerFactory]:
    factory = ServerFactory(launcher, tmp_path)
    yield factory
    killed = factory.kill_leftovers()
    assert not killed, f"a test left servers running (killed {killed}); use `async with start()`"


@pytest.fixture
async def mcp_server(server_factory: ServerFactory) -> AsyncIterator[RunningServer]:
    """A server with the default config."""
    async with server_factory.start() as server:
        yield server
