"""What the nemesis records: each call's history as its client saw it, and the audit of
its stream read back from the store afterwards. Plain data, no I/O (the checker reads it,
tests/nemesis/checker.py).

An :class:`Answer` is the end of a call as told to a client: ``("result", text)`` or
``("error", reason)`` with the JSON-RPC error's ``data.reason`` (or ``code<N>`` without
one, ``http<N>`` for an HTTP error without a JSON-RPC body, ``closed<N>`` for a
WebSocket close code, ``lost_before_id`` for a stream cut before its first event id).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Answer = tuple[str, str]


@dataclass
class Call:
    """One call of one client, as that client was told it."""

    client: str  # "legacy-0", "modern-1", "ws-0", "shim-0"
    kind: str  # legacy | modern | ws | shim
    label: str  # unique in the run
    tool: str  # slow | ask | task
    expect: str  # the result's text when it succeeds
    started: float
    ended: float | None = None
    progress: list[int] = field(default_factory=list)  # as given, across every resume
    answers: list[Answer] = field(default_factory=list)  # every end it was told
    stream: dict[str, Any] | None = None  # how the audit finds it in the store
    notes: list[str] = field(default_factory=list)  # resumes, retries (for the report)

    def answer(self, kind: str, value: str, now: float) -> None:
        self.answers.append((kind, value))
        if self.ended is None:
            self.ended = now

    @property
    def outcome(self) -> str:
        """``result``, ``error:<reason>``, or ``open`` (never ended)."""
        if not self.answers:
            return "open"
        kind, value = self.answers[0]
        return "result" if kind == "result" else f"error:{value}"


@dataclass
class Audit:
    """A call's stream replayed from the store after the run; ``gone`` when the store no
    longer has it (expired, or lost with its Redis), with what the store said."""

    progress: list[int] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    gone: str | None = None
