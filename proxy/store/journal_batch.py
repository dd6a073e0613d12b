"""What one session's :class:`~proxy.core.journal.Journal` adds to a group commit's
:class:`~proxy.store.base.Batch` (:class:`~proxy.store.persist.Persister`).

Keys name the session: ``epoch.number``. A stream's entries keep their order; a new
stream's record (or an announced seed's) goes in the batch's records, which a store
applies before the entries.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from proxy.store.base import LIVE, Batch, Entry, StreamRecord

if TYPE_CHECKING:
    from proxy.core.journal import Journal
    from proxy.core.session import Session

_new_entry = tuple.__new__
"""An :class:`Entry` made without its Python-level ``__new__``: half the time per event."""


def journal_into(
    batch: Batch, session: Session, j: Journal, server: str, owner: str, retention: float
) -> None:
    """Add what ``session`` noted (``j``) to ``batch`` and empty ``j`` (what
    :meth:`Journal.take` and adding the taken copy did, without a new journal per
    gathering); ``server``: the name of the server its streams were made at; ``owner``:
    this replica; ``retention``: how long an ended stream stays resumable. Only the parts
    that held something are replaced (a call's journal: two of seven)."""
    epoch = session.epoch
    if j.opened or j.announced:
        _records_into(batch, session, j, server, owner)
        j.opened, j.announced = [], []
    if j.appends:
        appends = batch.appends
        lists: dict[int, list[Entry]] = {}  # stream number -> its list in the batch
        number = -1
        found: list[Entry] = []
        for stream, seq, payload, mark in j.appends:
            if stream != number:  # (a burst: one stream, looked up once)
                number = stream
                got = lists.get(number)
                if got is None:
                    key = f"{epoch}.{number}"
                    got = appends.get(key)
                    if got is None:
                        got = appends[key] = []
                    lists[number] = got
                found = got
            found.append(_new_entry(Entry, (seq, payload, mark)))
        j.appends = []
    if j.trimmed:
        for number, first in j.trimmed.items():
            batch.trimmed[f"{epoch}.{number}"] = first
        j.trimmed = {}
    if j.completed:
        until = time.time() + retention
        for number in j.completed:
            batch.completed[f"{epoch}.{number}"] = until
        j.completed = []
    if j.dropped:
        for number in j.dropped:
            batch.dropped.append(f"{epoch}.{number}")
        j.dropped = []
    j.ended = None


def _records_into(batch: Batch, session: Session, j: Journal, server: str, owner: str) -> None:
    """The new streams' records (and the announced seeds') of what ``session`` noted."""
    sid, epoch, principal = session.session_id, session.epoch, session.principal
    streams = batch.streams
    for number in j.opened:  # (positional: keywords cost a third of the record's make)
        streams.append(
            StreamRecord(
                f"{epoch}.{number}",
                sid,
                owner,
                LIVE,
                1,
                0,
                session.client_ids(number),
                False,
                None,
                principal,
                server,
            )
        )
    for number in j.announced:
        record = StreamRecord(
            f"{epoch}.{number}",
            sid,
            owner,
            LIVE,
            1,
            0,
            session.client_ids(number),
            True,
            None,
            principal,
            server,
        )
        streams.append(record)
