"""A commit's ``EVALSHA`` packed for the Redis store's own connections
(:mod:`proxy.store.redis_wire`), its appended entries written as RESP directly.

``hiredis.pack_command`` takes one argument list: a burst's commit of 256 entries first
made a list of 768 arguments (each seq and mark formatted as bytes), then packed it. Then
each entry was one ``%``-format of its three bulk strings (bench/README.md, issue 23,
helper redis2), where an int's decimal digits (three per entry: its stream id and two
lengths) were most of the work. Now a run's ids, then its payloads, go as the script takes
them (:data:`~proxy.store.redis_lua.COMMIT_LUA`): no number is formatted per entry. The
ids of consecutive seqs are joins of constant digit strings (a thousand seqs share all
but their last three digits); a payload's length prefix is looked up by its length
(:data:`_HEADS`); the rest of the command still packed by hiredis (helper redis4). The
bytes are those ``pack_command`` makes of
:func:`~proxy.store.redis_layout.commit_call`'s arguments (``tests/store/test_redis_pack.py``).
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from hiredis import pack_command

from proxy.store.base import Batch, Entry, StoreLimits
from proxy.store.redis_layout import Layout, appended_args, commit_pieces, run_marks

_SMALL = [b"%d" % i for i in range(1000)]  # the digits of seqs below 1000
_LOW = [b"%03d" % i for i in range(1000)]  # the last three digits of the others
_PAYLOAD = itemgetter(1)
_MARK = itemgetter(2)
_CRLF = b"\r\n"
_HEADS_KEPT = 16384
FEW = 4
"""A run of at most this many entries (a call's answer) is packed by ``pack_command``
with the rest of the commit, its ids formatted one by one."""


class _Heads(dict[int, bytes]):
    """A bulk string's header by its length, made once per length (up to
    :data:`_HEADS_KEPT` of them kept)."""

    def __missing__(self, length: int) -> bytes:
        head = b"$%d\r\n" % length
        if len(self) < _HEADS_KEPT:
            self[length] = head
        return head


_HEADS = _Heads()


def _args(args: tuple[Any, ...]) -> bytes:
    """``args`` as RESP bulk strings, without the array header ``pack_command`` puts first."""
    packed: bytes = pack_command(args)
    return packed[packed.index(b"\r\n") + 2 :]


def _ids(first: int, count: int) -> bytes:
    """The stream ids ``seq-1`` of seqs ``first`` .. ``first + count - 1``, as RESP bulk
    strings: one join per thousand seqs (or per digit count below 1000)."""
    out: list[bytes] = []
    seq, end = first, first + count
    while seq < end:
        if seq < 1000:
            width = 1 if seq < 10 else 2 if seq < 100 else 3
            top = min(end, 10**width)
            prefix, digits = b"", _SMALL[seq:top]
        else:
            block, low = divmod(seq, 1000)
            top = min(end, seq - low + 1000)
            prefix = b"%d" % block
            width = len(prefix) + 3
            digits = _LOW[low : low + top - seq]
        head = b"$%d\r\n%b" % (width + 2, prefix)
        out.append(head + (b"-1\r\n" + head).join(digits) + b"-1\r\n")
        seq = top
    return b"".join(out)


def _payloads(entries: list[Entry]) -> bytes:
    """The entries' payloads as RESP bulk strings."""
    payloads = list(map(_PAYLOAD, entries))
    parts = [_CRLF] * (3 * len(payloads))
    parts[0::3] = map(_HEADS.__getitem__, map(len, payloads))
    parts[1::3] = payloads
    return b"".join(parts)


def _run(slot: int, entries: list[Entry]) -> tuple[int, bytes]:
    """A run of consecutive seqs (:func:`~proxy.store.redis_layout.runs`) as the script
    takes it, and its count of arguments."""
    first, n = entries[0].seq, len(entries)
    marks = run_marks(entries) if any(map(_MARK, entries)) else [0]
    packed = (_args((slot, n, first, *marks)), _ids(first, n), _payloads(entries))
    return 3 + len(marks) + 2 * n, b"".join(packed)


def pack_commit(
    sha: str, layout: Layout, bucket: int, batch: Batch, now: float, limits: StoreLimits
) -> bytes:
    """``EVALSHA sha`` of ``COMMIT_LUA`` for ``batch`` (all in ``bucket``), packed."""
    keys, head, appended, tail = commit_pieces(layout, bucket, batch, now, limits)
    if not appended or (len(appended) == 1 and len(appended[0][1]) <= FEW):
        # A call's commit (an answer, a few notifications): its few numbers formatted
        # cost less than the pieces' joins; all of it packed by hiredis in one call.
        args = appended_args(appended)
        whole: bytes = pack_command(("EVALSHA", sha, len(keys), *keys, *head, *args, *tail))
        return whole
    count = 3 + len(keys) + len(head) + len(tail)
    parts = [b"", _args(("EVALSHA", sha, len(keys), *keys, *head))]
    for slot, entries in appended:
        n, packed = _run(slot, entries)
        count += n
        parts.append(packed)
    parts.append(_args(tuple(tail)))
    parts[0] = b"*%d\r\n" % count
    return b"".join(parts)


def pack_per_bucket(layout: Layout, command: str, *args: str) -> bytes:
    """``command <live index> *args`` for every bucket's live index, packed (one join:
    the commands differ only in their key); ``BUCKETS`` replies."""
    head = b"*%d\r\n" % (2 + len(args)) + _args((command,))
    rest = _args(args)
    return head + (rest + head).join(layout.live_bulks) + rest
