"""MRTR ``requestState``: the proxy's tamper-proof handle on a call waiting for input.

When a legacy server asks its client something in the middle of a call (elicitation,
sampling, roots), a modern client gets an ``input_required`` result and retries the
original request with ``inputResponses`` and the ``requestState`` it was given
(``basic/patterns/mrtr.mdx``). The state names the upstream call that waits, and is bound
(spec §Server Requirements 5) to the principal, an expiry, and the originating request
(its method and a digest of its name or URI), and names the replica that holds the call
(``holder``: its owner id on a shared store, so that a retry sent to another replica is
forwarded there: :mod:`proxy.modern.retry_forward`), under an HMAC with the proxy's
secret::

    base64url(JSON payload) "." base64url(HMAC-SHA256(secret, "mrtr\\0" + payload))

Anything that fails verification, has lapsed or is presented on another request gets
``-32602``; never another call's answer. Time comes in as ``now``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from proxy.core.era import invalid_params

_DOMAIN = b"mrtr\0"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _digest(method: str, name: Any) -> str:
    return hashlib.sha256(f"{method}\0{name}".encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Parked:
    """What a verified ``requestState`` names: the call, and the replica holding it
    (None: a state minted without one, held by whoever minted it)."""

    call_id: str
    holder: str | None


def mint(
    secret: bytes,
    call_id: str,
    method: str,
    name: Any,
    principal: str | None,
    expires_at: float,
    holder: str | None = None,
) -> str:
    fields = {"c": call_id, "r": _digest(method, name), "p": principal, "e": round(expires_at, 3)}
    if holder is not None:
        fields["o"] = holder
    payload = json.dumps(fields, separators=(",", ":")).encode()
    mac = hmac.new(secret, _DOMAIN + payload, hashlib.sha256).digest()
    return f"{_b64(payload)}.{_b64(mac)}"


def verify(
    secret: bytes,
    state: object,
    method: str,
    name: Any,
    principal: str | None,
    now: float,
) -> str:
    """The call id ``state`` names; ``ModernError`` (-32602) if it is not valid here."""
    return read(secret, state, method, name, principal, now).call_id


def read(
    secret: bytes,
    state: object,
    method: str,
    name: Any,
    principal: str | None,
    now: float,
) -> Parked:
    """The call ``state`` names and its holder; ``ModernError`` (-32602) if it is not
    valid here."""
    if not isinstance(state, str) or state.count(".") != 1:
        raise invalid_params("Invalid params: requestState is not one this proxy issued")
    body, _, sig = state.partition(".")
    try:
        payload = _unb64(body)
        mac = _unb64(sig)
    except (binascii.Error, ValueError):
        raise invalid_params("Invalid params: requestState is not one this proxy issued") from None
    expected = hmac.new(secret, _DOMAIN + payload, hashlib.sha256).digest()
    if not hmac.compare_digest(expected, mac):
        raise invalid_params("Invalid params: requestState failed verification")
    try:
        fields = json.loads(payload)
        call_id, digest, bound, expires = fields["c"], fields["r"], fields["p"], fields["e"]
    except (ValueError, KeyError, TypeError):
        raise invalid_params("Invalid params: requestState failed verification") from None
    if not isinstance(expires, int | float) or now > expires:
        raise invalid_params("Invalid params: requestState has expired; send the request anew")
    if bound != principal:
        raise invalid_params("Invalid params: requestState belongs to another principal")
    if digest != _digest(method, name):
        raise invalid_params("Invalid params: requestState belongs to another request")
    holder = fields.get("o")
    if not isinstance(call_id, str) or not (holder is None or isinstance(holder, str)):
        raise invalid_params("Invalid params: requestState failed verification")
    return Parked(call_id, holder)


def served_here(parked: Parked, owner: str) -> bool:
    """Whether the replica ``owner`` continues the call itself (else it forwards the
    retry to the holder the state names)."""
    return parked.holder is None or parked.holder == owner
