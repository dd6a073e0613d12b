"""Fixtures the HTTP upstream's scripted-server tests share
(``test_http_upstream.py``, ``test_http_upstream_failures.py``).

``server`` is a :class:`ScriptedServer` (``tests/fixtures/http_scripted_server.py``) on a free
port, stopped in ``finally``; ``log`` captures structlog's events for the test and restores
the defaults after it (a module that defines its own ``log``, as ``test_stdio.py`` does, uses
that one).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog

from tests.fixtures.http_scripted_server import ScriptedServer


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    srv = ScriptedServer()
    await srv.start()
    try:
        yield srv
    finally:
        await srv.stop()


@pytest.fixture
def log() -> Any:
    capture = structlog.testing.LogCapture()
    structlog.configure(processors=[capture])
    yield capture
    structlog.reset_defaults()
