"""``@record`` (proxy/core/record.py): equal and hashed by fields as a frozen dataclass is,
slotted; the type checker refuses writes (``frozen_default``, checked by mypy on proxy/)."""

from __future__ import annotations

import dataclasses

from proxy.core.events import CloseClient, SendToClient
from proxy.core.jsonrpc import classify
from proxy.core.record import record


@record
class Point:
    x: int
    y: int = 0


def test_a_record_is_equal_and_hashed_by_its_fields() -> None:
    assert Point(1, 2) == Point(1, 2) != Point(2, 1)
    assert hash(Point(1, 2)) == hash(Point(1, 2))
    assert {Point(1), Point(1)} == {Point(1, 0)}
    assert repr(Point(1)) == "Point(x=1, y=0)"


def test_a_record_is_slotted_and_a_dataclass() -> None:
    assert not hasattr(Point(1), "__dict__")
    assert dataclasses.is_dataclass(Point)
    assert dataclasses.replace(Point(1, 2), y=3) == Point(1, 3)


def test_commands_and_messages_are_records() -> None:
    assert CloseClient(3) == CloseClient(3) and hash(CloseClient(3)) == hash(CloseClient(3))
    assert SendToClient(1, "e", b"x") != SendToClient(1, "e", b"y")
    # Message.wire is left out of equality, as before.
    a = classify({"jsonrpc": "2.0", "id": 1, "result": {}}, b"one")
    b = classify({"jsonrpc": "2.0", "id": 1, "result": {}}, b"two")
    assert a == b
