"""What replicas tell each other about which ``/ws`` socket carries a session's standalone
stream (issue 19; :mod:`proxy.standalone_seat` decides it on the holder). Part of the
messages of :mod:`proxy.forwarding`, which encodes and decodes them with the others.

- A :class:`~proxy.forwarding.ForwardedGet` from a socket names it (:class:`WsSocket`:
  its replica and a token of its own): the socket takes the stream from whichever
  socket has it.
- :class:`StandaloneTakeover` (``standalone_takeover``), from the holder to the replica
  of the socket that has it: stop writing it, a newer socket takes it; the reply
  :class:`StandaloneStopped` (``standalone_stopped``) says the last event the socket
  wrote (None: no such socket there any more).
- :class:`StandaloneRelease` (``standalone_release``), from that replica to the holder:
  the socket closed having written up to ``upto``; a message nobody waits a reply for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.forwarding_fields import MalformedForward, is_int, object_of, text_field


@dataclass(frozen=True, slots=True)
class WsSocket:
    """A ``/ws`` socket on replica ``replica``, known to it as ``token``."""

    replica: str
    token: str


@dataclass(frozen=True, slots=True)
class StandaloneTakeover:
    """The socket ``token`` (on the replica this is sent to) is to stop writing its
    session's standalone stream: a newer socket takes it."""

    token: str


@dataclass(frozen=True, slots=True)
class StandaloneRelease:
    """The socket ``token`` of the asking replica closed, having written the standalone
    stream of ``session`` (of ``principal`` at ``server``) up to seq ``upto``."""

    session: str
    server: str
    principal: str | None
    token: str
    upto: int


@dataclass(frozen=True, slots=True)
class StandaloneStopped:
    """The socket stopped after writing seq ``upto`` (None: no such socket here)."""

    upto: int | None


def encode_socket(socket: WsSocket | None) -> dict[str, str] | None:
    return None if socket is None else {"replica": socket.replica, "token": socket.token}


def decode_socket(fields: Mapping[str, Any]) -> WsSocket | None:
    """The ``socket`` field (absent: a replica from before it, an HTTP GET)."""
    wire = fields.get("socket")
    if wire is None:
        return None
    socket = object_of(wire)
    return WsSocket(text_field(socket, "replica"), text_field(socket, "token"))


def seq_field(fields: Mapping[str, Any], key: str) -> int:
    value = fields.get(key)
    if not is_int(value) or value < 0:
        raise MalformedForward(f"{key} must be an integer, at least 0")
    return value


def optional_seq_field(fields: Mapping[str, Any], key: str) -> int | None:
    """Present, if null (as :func:`~proxy.forwarding_fields.optional_text_field`)."""
    if key in fields and fields[key] is None:
        return None
    return seq_field(fields, key)
