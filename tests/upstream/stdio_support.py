"""What the stdio reader's tests share (``test_stdio_reader.py``, ``test_stdio_turns.py``):
a :class:`StdioUpstream` running a test's own Python script, started and stopped."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from proxy.config_upstream import UpstreamConfig
from proxy.core.jsonrpc import Message
from proxy.upstream.base import UpstreamContext
from proxy.upstream.stdio import StdioUpstream


@contextlib.asynccontextmanager
async def script_upstream(
    script: Path,
    on_message: Callable[[Message, int | None], None],
    *args: str,
    **config: Any,
) -> AsyncIterator[StdioUpstream]:
    """``script`` (with ``args``) run by this Python as a stdio server, its messages handed
    to ``on_message``; ``config``: more of its :class:`UpstreamConfig`. Stopped on the way
    out."""
    up = StdioUpstream(
        UpstreamContext(
            UpstreamConfig(command=[sys.executable, str(script), *args], **config),
            "test-session-id",
            on_message=on_message,
            on_closed=lambda reason: None,
        )
    )
    await up.start()
    try:
        yield up
    finally:
        await up.stop()
