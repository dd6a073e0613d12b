"""What a session changed in its streams, for a runtime that keeps them in a durable store.

The core decides; the runtime persists (DESIGN.md §9). A session with a journal notes
every change a store must know of, in the order it made them; the runtime names the
journal to its persister after each event that noted something, and the persister adds
what it holds to its batch and empties it (``proxy.store.journal_batch.journal_into``)
once per loop turn, and commits it before any event it names reaches a client. Without
a journal (the memory store) nothing is noted and nothing costs.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Journal:
    # (stream number, seq, payload, poll mark), in append order
    appends: list[tuple[int, int, bytes, int]] = field(default_factory=list)
    opened: list[int] = field(default_factory=list)  # new streams
    trimmed: dict[int, int] = field(default_factory=dict)  # stream -> first seq it keeps
    announced: list[int] = field(default_factory=list)  # seed: notifications/stream/create
    completed: list[int] = field(default_factory=list)  # LIVE -> COMPLETED
    dropped: list[int] = field(default_factory=list)  # forgotten: no longer resumable
    ended: str | None = None  # the session ended, and why (its streams are all forgotten)

    def __bool__(self) -> bool:
        return bool(
            self.appends
            or self.opened
            or self.trimmed
            or self.announced
            or self.completed
            or self.dropped
            or self.ended is not None
        )

    def take(self) -> Journal:
        """Everything noted so far; this journal starts empty again."""
        taken = Journal(
            self.appends,
            self.opened,
            self.trimmed,
            self.announced,
            self.completed,
            self.dropped,
            self.ended,
        )
        self.appends, self.opened, self.trimmed, self.announced = [], [], {}, []
        self.completed, self.dropped, self.ended = [], [], None
        return taken
