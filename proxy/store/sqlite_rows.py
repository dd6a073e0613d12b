"""How the SQLite store's rows hold a stream: the record's columns (:func:`stream_row`,
:func:`stream_record`, ``request_ids`` as JSON: :func:`ids_json`) and the statements that
write a record or one event (:data:`PUT_STREAM`, :data:`INSERT_ONE`; runs of events:
:mod:`proxy.store.sqlite_runs`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from json.encoder import encode_basestring_ascii
from typing import Any

from proxy.store.base import StreamRecord

STREAM_COLUMNS = (
    "key, session_id, owner, state, first_seq, last_seq, request_ids, announced, expires_at,"
    " principal, server, fence"
)
PUT_STREAM = f"INSERT OR REPLACE INTO streams ({STREAM_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
# sqlite3 binds an exact int, float, str or bytearray as it is, but an event's payload,
# bytes, is first looked up as an object to adapt: the adapter registry, then
# ``__adapt__`` on the protocol (an AttributeError raised and cleared), then
# ``__conform__`` on it: ~3,300 instructions per event inserted (callgrind, CPython 3.11).
# With ``bytes`` registered the first look-up finds it: about a fifth off a multi-row
# INSERT per event (then a row per event). The adapter: ``bytes.__bytes__`` (an exact
# bytes object back as it is) rather than the type ``bytes`` (a type call that looks
# ``__bytes__`` up and calls it): ~730 fewer instructions per event bound. Process-wide,
# and a no-op for every value it sees (the registry is keyed by exact type).
sqlite3.register_adapter(bytes, bytes.__bytes__)


INSERT_ONE = "INSERT OR REPLACE INTO events (key, seq, payload, mark) VALUES (?, ?, ?, ?)"
"""One event's row (its ``run`` NULL: :mod:`proxy.store.sqlite_runs`), bound as the key
then an :class:`Entry`."""


def ids_json(ids: list[Any]) -> str:
    """``json.dumps(ids)``, the same text; none (a call answered by the time its record
    is committed: most calls') or one int or str id without the encoder's Python layers,
    which showed in a call's commit."""
    if not ids:
        return "[]"
    if len(ids) == 1:
        only = ids[0]
        if type(only) is int:
            return f"[{only}]"
        if type(only) is str:
            return f"[{encode_basestring_ascii(only)}]"
    return json.dumps(ids)


def stream_row(record: StreamRecord) -> tuple[Any, ...]:
    return (
        record.key,
        record.session_id,
        record.owner,
        record.state,
        record.first_seq,
        record.last_seq,
        ids_json(record.request_ids),
        int(record.announced),
        record.expires_at,
        record.principal,
        record.server,
        record.fence,
    )


def stream_record(row: Sequence[Any]) -> StreamRecord:
    key, session_id, owner, state, first, last, request_ids, announced, expires, *rest = row
    principal, server, fence = rest
    return StreamRecord(
        key,
        session_id,
        owner,
        state,
        first,
        last,
        [] if request_ids == "[]" else json.loads(request_ids),  # (most: see ids_json)
        bool(announced),
        expires,
        principal,
        server,
        fence=fence or "",
    )
