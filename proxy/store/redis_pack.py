"""A commit's ``EVALSHA`` packed for the Redis store's own connections
(:mod:`proxy.store.redis_wire`), its appended entries written as RESP directly.

``hiredis.pack_command`` takes one argument list: a burst's commit of 256 entries first
made a list of 768 arguments (each seq and mark formatted as bytes), then packed it. Here
each entry is one ``%``-format of its three bulk strings (a mark of 0, nearly every
event's, is a constant), the rest of the command still packed by hiredis: about a third
less client CPU per entry (bench/README.md, issue 23, helper redis2). The bytes are those
``pack_command`` makes of :func:`~proxy.store.redis_layout.commit_call`'s arguments
(``tests/store/test_redis_pack.py``).
"""

from __future__ import annotations

from typing import Any

from hiredis import pack_command

from proxy.store.base import Batch, Entry, StoreLimits
from proxy.store.redis_layout import Layout, commit_pieces

_MARK_NONE = b"$1\r\n0\r\n"


def _args(args: tuple[Any, ...]) -> bytes:
    """``args`` as RESP bulk strings, without the array header ``pack_command`` puts first."""
    packed: bytes = pack_command(args)
    return packed[packed.index(b"\r\n") + 2 :]


def _entries(entries: list[Entry]) -> bytes:
    out: list[bytes] = []
    add = out.append
    for seq, payload, mark in entries:
        s = b"%d-1" % seq  # the stream id the script adds it under
        if mark:
            m = b"%d" % mark  # an IntFlag mark would go as its repr
            fields = (len(s), s, len(payload), payload, len(m), m)
            add(b"$%d\r\n%b\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % fields)
        else:
            add(b"$%d\r\n%b\r\n$%d\r\n%b\r\n%b" % (len(s), s, len(payload), payload, _MARK_NONE))
    return b"".join(out)


def pack_commit(
    sha: str, layout: Layout, bucket: int, batch: Batch, now: float, limits: StoreLimits
) -> bytes:
    """``EVALSHA sha`` of ``COMMIT_LUA`` for ``batch`` (all in ``bucket``), packed."""
    keys, head, appended, tail = commit_pieces(layout, bucket, batch, now, limits)
    count = 3 + len(keys) + len(head) + len(tail)
    parts = [b"", _args(("EVALSHA", sha, len(keys), *keys, *head))]
    for slot, entries in appended:
        count += 3 + 3 * len(entries)
        parts.append(_args((slot, len(entries), entries[0].seq)))
        parts.append(_entries(entries))
    parts.append(_args(tuple(tail)))
    parts[0] = b"*%d\r\n" % count
    return b"".join(parts)
