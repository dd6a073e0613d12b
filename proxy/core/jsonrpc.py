"""Parse, classify and serialise JSON-RPC 2.0 messages.

A message is kept as the parsed ``dict`` it arrived as, so that everything the proxy does
not need to touch passes through byte-for-byte equivalent; only ``id`` (and
``params.requestId`` of a cancellation) is rewritten at the session boundary.
"""

from __future__ import annotations

from dataclasses import field
from enum import Enum
from typing import Any

from proxy.core import jsoncodec
from proxy.core.errors import InvalidMessage, ParseError, error_message
from proxy.core.protocol import JSONRPC_VERSION
from proxy.core.record import record


class Kind(Enum):
    REQUEST = "request"
    NOTIFICATION = "notification"
    RESPONSE = "response"  # result or error


# (Enum members read as module constants: through the class, 3.11's ``EnumType.__getattr__``
# hook makes each read cost ~25 times a global's, and these are read per event.)
_NOTIFICATION = Kind.NOTIFICATION
_REQUEST = Kind.REQUEST
_RESPONSE = Kind.RESPONSE


@record
class Message:
    """One classified JSON-RPC message; ``raw`` is the parsed object.

    ``wire`` is the message's own serialisation when it arrived alone on one line and is
    safe to pass on unchanged (no CR or LF inside): forwarding it saves a re-encode.
    """

    kind: Kind
    raw: dict[str, Any]
    wire: bytes | None = field(default=None, compare=False, repr=False)

    def encoded(self) -> bytes:
        """The message as one line of compact JSON (its own bytes when it has them)."""
        return self.wire if self.wire is not None else encode(self.raw)

    @property
    def id(self) -> Any:
        return self.raw.get("id")

    @property
    def method(self) -> str | None:
        method = self.raw.get("method")
        return method if isinstance(method, str) else None

    @property
    def params(self) -> dict[str, Any]:
        params = self.raw.get("params")
        return params if isinstance(params, dict) else {}

    @property
    def is_error(self) -> bool:
        return self.kind is _RESPONSE and "error" in self.raw


_PARAMS = (dict, list)  # (a tuple: isinstance on a union builds one each call)


def answers_only(messages: list[Message]) -> bool:
    """Whether a body holds only responses: the client's answers to the server's
    requests, which a session drops once it has had them (so they may be sent twice)."""
    return all(m.kind is Kind.RESPONSE for m in messages)


def _valid_id(value: Any) -> bool:
    # JSON-RPC 2.0 §4: String, Number or Null; MCP forbids null for requests.
    kind = type(value)
    if kind is str or kind is int:  # (what JSON decodes to: no isinstance walk)
        return True
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def classify(obj: Any, wire: bytes | None = None) -> Message:
    """Classify one decoded JSON value; raise :class:`InvalidMessage` if it is not JSON-RPC.

    ``wire``: the value's own serialisation, from :func:`wire_of` (kept as ``Message.wire``).
    """
    if not isinstance(obj, dict):
        raise InvalidMessage("Invalid Request: a JSON-RPC message must be an object")
    if obj.get("jsonrpc") != JSONRPC_VERSION:
        raise InvalidMessage('Invalid Request: "jsonrpc" must be "2.0"', request_id=_id_of(obj))
    if "method" in obj:
        if not isinstance(obj["method"], str):
            raise InvalidMessage(
                'Invalid Request: "method" must be a string', request_id=_id_of(obj)
            )
        if "params" in obj and not isinstance(obj["params"], _PARAMS):
            raise InvalidMessage(
                'Invalid Request: "params" must be an object or array', request_id=_id_of(obj)
            )
        if "id" not in obj:
            return Message(_NOTIFICATION, obj, wire)
        if not _valid_id(obj["id"]):
            raise InvalidMessage('Invalid Request: "id" must be a string or an integer')
        return Message(_REQUEST, obj, wire)
    has_result, has_error = "result" in obj, "error" in obj
    if has_result == has_error:
        raise InvalidMessage(
            'Invalid Request: need exactly one of "method", "result" or "error"',
            request_id=_id_of(obj),
        )
    if has_error and not (isinstance(obj["error"], dict) and "code" in obj["error"]):
        raise InvalidMessage('Invalid Request: "error" must be an object with a code')
    rid = obj.get("id")
    if not (_valid_id(rid) or (has_error and rid is None)):
        raise InvalidMessage('Invalid Request: a response needs a string or integer "id"')
    return Message(_RESPONSE, obj, wire)


def _id_of(obj: dict[str, Any]) -> Any:
    rid = obj.get("id")
    return rid if _valid_id(rid) else None


def decode(data: bytes | str) -> Any:
    """Decode JSON text; raise :class:`ParseError` (-32700) on anything that is not JSON."""
    try:
        return jsoncodec.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ParseError(f"Parse error: {exc}") from None


def parse_body(data: bytes | str) -> tuple[list[Message], bool]:
    """Parse an HTTP body: one message, or a batch (a JSON array).

    Returns the messages and whether the body was a batch. An empty batch is invalid
    (JSON-RPC 2.0 §6).
    """
    obj = decode(data)
    if isinstance(obj, list):
        if not obj:
            raise InvalidMessage("Invalid Request: empty batch")
        return [classify(item) for item in obj], True
    return [classify(obj, wire_of(data) if isinstance(data, bytes) else None)], False


def parse_line(data: bytes) -> Message:
    """Parse one newline-delimited message (stdio transport); no batches."""
    return classify(decode(data), wire_of(data))


def wire_of(data: bytes) -> bytes | None:
    """``data`` (one message's text) as its serialisation to pass on, when that is safe."""
    data = data.strip()
    # CR, LF, NUL (NUL: a UTF-16/32 body), by byte value: ``b"\r" in data`` first tries
    # the operand as an int and clears the TypeError, several times the cost of the search.
    if 13 in data or 10 in data or 0 in data:
        return None
    return data


def with_wire(msg: Message, data: bytes) -> Message:
    """``msg`` remembering ``data`` as its serialisation, when that is safe to reuse."""
    wire = wire_of(data)
    return msg if wire is None else Message(msg.kind, msg.raw, wire)


def encode(obj: dict[str, Any]) -> bytes:
    """Serialise compactly on one line (never contains a newline: safe for stdio and SSE).

    A string holding a lone surrogate (JSON may spell one, ``"\\ud800"``, UTF-8 cannot)
    is written ASCII-escaped instead, which is still the same JSON value.
    """
    return jsoncodec.dumps(obj)


def with_id(msg: Message, new_id: Any) -> dict[str, Any]:
    """A shallow copy of the message with ``id`` replaced."""
    out = dict(msg.raw)
    out["id"] = new_id
    return out


def with_param(msg: Message, key: str, value: Any) -> dict[str, Any]:
    """A shallow copy of the message with ``params[key]`` replaced."""
    return {**msg.raw, "params": {**msg.params, key: value}}


def ok_response(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": JSONRPC_VERSION, "id": request_id, "result": result}


# Not a second builder: the one in core/errors.py, under the name older callers use.
error_response = error_message
