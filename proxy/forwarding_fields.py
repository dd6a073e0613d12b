"""Reading the fields of what replicas send each other (:mod:`proxy.forwarding`,
:mod:`proxy.forwarding_seat`): each check raises :class:`MalformedForward` naming the
field, and nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

# A JSON-RPC request id (JSON-RPC 2.0 §4: a string, a number or null; never a boolean).
RequestId = str | int | None


class MalformedForward(ValueError):
    """What :func:`proxy.forwarding.decode_request` and :func:`~proxy.forwarding.decode_reply`
    raise for anything that is not a message replicas send, whatever is wrong with it."""


def messages_field(fields: Mapping[str, Any], what: str) -> list[dict[str, Any]]:
    value = fields.get("messages")
    if not isinstance(value, list) or not value or not all(isinstance(m, dict) for m in value):
        raise MalformedForward(f"{what}: messages must be a non-empty list of objects")
    return value


def object_of(wire: object) -> Mapping[str, Any]:
    if not isinstance(wire, dict):
        raise MalformedForward(f"a forwarded message is an object, not {type(wire).__name__}")
    return wire


def text_field(fields: Mapping[str, Any], key: str) -> str:
    value = fields.get(key)
    if not isinstance(value, str):
        raise MalformedForward(f"{key} must be a string")
    return value


def optional_text_field(fields: Mapping[str, Any], key: str) -> str | None:
    # Present, if null: a field left out is as likely a bug as a choice.
    if key not in fields:
        raise MalformedForward(f"{key} is missing (null when there is none)")
    value = fields[key]
    if value is not None and not isinstance(value, str):
        raise MalformedForward(f"{key} must be a string or null")
    return value


def request_id_field(fields: Mapping[str, Any]) -> RequestId:
    if "request_id" not in fields:
        raise MalformedForward("request_id is missing (null when there is none)")
    value = fields["request_id"]
    if value is None or isinstance(value, str) or is_int(value):
        return value
    raise MalformedForward("request_id must be a JSON-RPC id (a string, an integer or null)")


def is_int(value: object) -> TypeGuard[int]:
    # bool is an int to Python, never to JSON.
    return isinstance(value, int) and not isinstance(value, bool)
