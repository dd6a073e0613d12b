"""Server-Sent Events as a server wrote them, event by event, for clients that check it.

Each event keeps the ``id`` field of its own block, or None: unlike
``proxy.core.sse.SSEDecoder``, which follows the WHATWG rules of a browser (the last event
ID carries over to later events, and a block without data is not dispatched), this shows
which events carried an id, and a block with an id and no data is an event too. Comment
lines (``: keepalive``) and retry-only blocks are no events.
"""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass
from typing import Any


@dataclass
class SseEvent:
    id: str | None
    data: str

    @property
    def message(self) -> dict[str, Any] | None:
        """The JSON-RPC message, or None for a priming event (id, empty data)."""
        return json.loads(self.data) if self.data else None


class SseSplitter:
    """Feed it bytes in any chunking; it returns the events those bytes complete."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._buffer = ""

    def feed(self, chunk: bytes) -> list[SseEvent]:
        self._buffer += self._decoder.decode(chunk).replace("\r\n", "\n").replace("\r", "\n")
        *blocks, self._buffer = self._buffer.split("\n\n")
        return [event for block in blocks if (event := _event(block)) is not None]


def _event(block: str) -> SseEvent | None:
    event_id: str | None = None
    data: list[str] = []
    for line in block.split("\n"):
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "id":
            event_id = value
        elif name == "data":
            data.append(value)
    if event_id is None and not data:  # a comment (keepalive) or a retry-only block
        return None
    return SseEvent(event_id, "\n".join(data))
