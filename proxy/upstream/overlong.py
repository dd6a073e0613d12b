"""Over-long lines of a stdio server: skip exactly one line, and tell from its two ends
what it was (DESIGN.md U1; issue: a response over ``upstream.max_line_bytes`` must not leave
its request waiting forever).

:class:`LineSplitter` cuts what a pipe gives, read by read, into lines; a line over the
limit is taken through its own newline, never further, keeping only its first and last
``KEEP_BYTES``; :func:`outline` reads the top-level members of the JSON object from those
two ends.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

# How much of each end of an over-long line is kept to tell what it was: the SDKs write
# "id" first (Python) or last (TypeScript).
KEEP_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class OverlongLine:
    """A line longer than the reader's limit: its size (without the newline) and at most
    ``keep`` bytes of each end (they overlap when the line is shorter than both)."""

    size: int
    head: bytes
    tail: bytes


class LineSplitter:
    """The lines of a byte stream fed in reads of any size (issue 23: one split per read,
    not one ``readuntil`` per line).

    :meth:`feed` gives the lines a read completed, without their newlines; :meth:`end`
    the last one, which lacks its newline (none when it is empty). A line of at most
    ``limit`` bytes comes whole; a longer one, however it arrives, comes as one
    :class:`OverlongLine` once its newline (or the end) does. Held at once: the line under
    way while it is within the limit (its pieces, joined when it ends), then only the
    ends of an over-long one, so at most about ``limit`` plus one read plus ``2 * keep``.
    """

    def __init__(self, limit: int, keep: int = KEEP_BYTES) -> None:
        self.limit = limit
        self.keep = keep
        self._pieces: list[bytes] = []  # the line under way, within the limit so far
        self._held = 0  # their bytes
        self._over: _Overlong | None = None  # the line under way is over the limit

    @property
    def held(self) -> int:
        """Bytes held of the line under way: its pieces, or the two ends kept of it."""
        over = self._over
        return self._held if over is None else len(over.head) + len(over.tail)

    def feed(self, data: bytes) -> list[bytes | OverlongLine]:
        """The lines ``data`` completes, in order (empty lines too)."""
        raw = data.split(b"\n")
        partial = raw.pop()  # after the last newline: the next line's start
        lines = cast(list[bytes | OverlongLine], raw)  # (each over-long one replaced)
        if raw:
            first = raw[0]
            start = 1  # lines[0] ends the line under way, if there is one
            if self._over is not None:
                lines[0] = self._over.ending(first)
                self._over = None
            elif self._pieces:
                self._pieces.append(first)
                lines[0] = self._whole(b"".join(self._pieces))
                self._pieces, self._held = [], 0
            else:
                start = 0
            if len(data) > self.limit:  # only then can a line within data be over it
                lines[start:] = [self._whole(line) for line in raw[start:]]
        if partial:
            self._more(partial)
        return lines

    def end(self) -> list[bytes | OverlongLine]:
        """At the end of the stream: the last line, which had no newline (if any)."""
        if self._over is not None:
            over, self._over = self._over, None
            return [over.ending(b"")]
        line = b"".join(self._pieces)
        self._pieces, self._held = [], 0
        return [line] if line else []

    def _whole(self, line: bytes) -> bytes | OverlongLine:
        if len(line) <= self.limit:
            return line
        over = _Overlong(self.keep)
        return over.ending(line)

    def _more(self, piece: bytes) -> None:
        """A piece of the line under way, whose newline has not come yet."""
        if self._over is not None:
            self._over.add(piece)
            return
        self._pieces.append(piece)
        self._held += len(piece)
        if self._held > self.limit:  # over already: keep its ends only
            self._over = _Overlong(self.keep)
            self._over.add(b"".join(self._pieces))
            self._pieces, self._held = [], 0


class _Overlong:
    """The size and the two ends of an over-long line seen so far."""

    __slots__ = ("head", "keep", "size", "tail")

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.size = 0
        self.head = b""
        self.tail = b""

    def add(self, piece: bytes) -> None:
        keep = self.keep
        self.size += len(piece)
        if len(self.head) < keep:
            self.head += piece[: keep - len(self.head)]
        self.tail = (self.tail + piece[-keep:])[-keep:]

    def ending(self, piece: bytes) -> OverlongLine:
        self.add(piece)
        return OverlongLine(self.size, self.head, self.tail)


# The outline of a JSON object of which only the two ends are known. ------------------

_WHITESPACE = b" \t\r\n"
_BACKSLASH = 0x5C
_STRUCTURE = re.compile(rb'["{}\[\]]')
_SCALAR = re.compile(rb'[^\s,:"{}\[\]]*')
_INT = re.compile(rb"-?(?:0|[1-9][0-9]*)")


@dataclass(frozen=True, slots=True)
class Outline:
    """What the ends of an over-long line show of the object on it: the names of the
    top-level members seen, and the top-level ``id`` when it is seen whole."""

    keys: frozenset[str]
    id: int | str | None

    @property
    def kind(self) -> str:
        """response, request, notification or unknown (nothing JSON-RPC-like seen). A
        request whose ``id`` member lies in the unseen middle shows as a notification."""
        if "method" in self.keys:
            return "request" if "id" in self.keys else "notification"
        if self.keys & {"result", "error"}:
            return "response"
        return "unknown"

    @property
    def response_id(self) -> int | str | None:
        """The id to answer: only for a response (a "result" or "error" member, no
        "method") whose id was seen whole."""
        return self.id if self.kind == "response" else None


def outline(head: bytes, tail: bytes) -> Outline:
    """Read the top-level members of a JSON object from its first and last bytes.

    ``head`` is scanned forwards from the opening brace, ``tail`` backwards from the
    closing one; both track nesting and strings (with escapes), so an "id" inside the
    result is never taken for the message's. Never raises; garbage gives no members.
    Limits: a member is seen only when it lies whole within one end, together with
    everything between it and that end (a member in the unseen middle is missed); a batch
    (a JSON array) or a non-UTF-8 encoding shows nothing; of duplicate names the last
    seen wins, as with ``json.loads``. An integer id of over 4300 digits is not read.
    """
    members = dict(_members_forward(head))
    members.update(reversed(list(_members_backward(tail))))  # in document order
    return Outline(frozenset(members), _id_value(members.get("id")))


def _id_value(raw: bytes | None) -> int | str | None:
    """A JSON-RPC id (a string or an integer) from its JSON text, else None."""
    if raw is None:
        return None
    try:
        if raw[:1] == b'"':
            value = json.loads(raw)
            return value if isinstance(value, str) else None
        return int(raw) if _INT.fullmatch(raw) else None
    except ValueError:  # bad escapes or UTF-8; int's digit limit
        return None


def _name(raw: bytes) -> str | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def _skip(data: bytes, i: int) -> int:
    while i < len(data) and data[i] in _WHITESPACE:
        i += 1
    return i


def _skip_back(data: bytes, j: int) -> int:
    while j > 0 and data[j - 1] in _WHITESPACE:
        j -= 1
    return j


def _string_end(data: bytes, i: int) -> int:
    """After the string that opens at ``data[i]``; -1 if it does not end within data."""
    j = i + 1
    while (q := data.find(b'"', j)) >= 0:
        k = q
        while data[k - 1] == _BACKSLASH:  # stops at the opening quote at the latest
            k -= 1
        if (q - k) % 2 == 0:  # an even run of backslashes escapes only themselves
            return q + 1
        j = q + 1
    return -1


def _value_end(data: bytes, i: int) -> int:
    """After the value that starts at ``data[i]``; -1 if it may go on past data."""
    first = data[i : i + 1]
    if first == b'"':
        return _string_end(data, i)
    if first in (b"{", b"["):
        depth = 0
        j = i
        while match := _STRUCTURE.search(data, j):
            if match.group() == b'"':
                j = _string_end(data, match.start())
                if j < 0:
                    return -1
                continue
            depth += 1 if match.group() in b"{[" else -1
            j = match.end()
            if depth == 0:
                return j
        return -1
    end = _SCALAR.match(data, i).end()  # type: ignore[union-attr]  # matches empty
    return end if i < end < len(data) else -1  # a number ends only at a delimiter


def _members_forward(data: bytes) -> Iterator[tuple[str, bytes | None]]:
    """The top-level members of the object ``data`` starts with: (name, JSON text of the
    value), the value None where data ends inside it."""
    i = _skip(data, 0)
    if data[i : i + 1] != b"{":
        return
    i += 1
    while True:
        i = _skip(data, i)
        if data[i : i + 1] != b'"' or (end := _string_end(data, i)) < 0:
            return
        if (name := _name(data[i:end])) is None:
            return
        i = _skip(data, end)
        if data[i : i + 1] != b":":
            return
        i = _skip(data, i + 1)
        end = _value_end(data, i)
        if end < 0:
            yield name, None
            return
        yield name, data[i:end]
        i = _skip(data, end)
        if data[i : i + 1] != b",":
            return
        i += 1


def _string_start(data: bytes, q: int) -> int:
    """The opening quote of the string that closes at ``data[q]``; -1 if it is not
    known to lie within data (a run of backslashes reaching the start is ambiguous)."""
    while (p := data.rfind(b'"', 0, q)) > 0:
        k = p
        while k > 0 and data[k - 1] == _BACKSLASH:
            k -= 1
        if k == 0:
            return -1
        if (p - k) % 2 == 0:
            return p
        q = p
    return -1


def _value_start(data: bytes, end: int) -> int:
    """Where the value that ends before ``data[end]`` starts; -1 if it may start
    before data."""
    last = data[end - 1 : end]
    if last == b'"':
        return _string_start(data, end - 1)
    if last in (b"}", b"]"):
        depth = 0
        j = end
        while j > 0:
            j -= 1
            c = data[j]
            if c == 0x22:  # '"'
                j = _string_start(data, j)
                if j < 0:
                    return -1
            elif c in b"}]":
                depth += 1
            elif c in b"{[":
                depth -= 1
                if depth == 0:
                    return j
        return -1
    start = end
    while start > 0 and data[start - 1] not in b' \t\r\n,:"{}[]':
        start -= 1
    return start if 0 < start < end else -1  # at 0 it may go on before data


def _members_backward(data: bytes) -> Iterator[tuple[str, bytes]]:
    """The top-level members of the object ``data`` ends with, last first: (name, JSON
    text of the value); stops at the first member not wholly within data."""
    j = _skip_back(data, len(data))
    if data[j - 1 : j] != b"}":
        return
    j -= 1
    while True:
        j = _skip_back(data, j)
        if (start := _value_start(data, j)) < 0:
            return
        k = _skip_back(data, start)
        if data[k - 1 : k] != b":":
            return
        k = _skip_back(data, k - 1)
        if data[k - 1 : k] != b'"' or (opening := _string_start(data, k - 1)) < 0:
            return
        if (name := _name(data[opening:k])) is None:
            return
        yield name, data[start:j]
        j = _skip_back(data, opening)
        if data[j - 1 : j] != b",":
            return
        j -= 1
