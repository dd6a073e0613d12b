"""JSON text to Python values and back: msgspec when it is installed, else the standard library.

msgspec (``pip install 'mcp-resume-proxy[fast]'``) reads and writes a JSON-RPC message
several times faster than :mod:`json`, and reads what :mod:`json` reads to the same
values, integers of any size included (orjson reads those as floats, so the proxy does
not use it). Where msgspec refuses, the standard library decides, so the proxy accepts
and refuses exactly what it did without msgspec, with the same error text:

- ``NaN``, ``Infinity`` and numbers too large for a float (``1e400``) are not JSON, but
  :mod:`json` reads and writes them; they are read as :class:`Special` floats, which are
  written back as they were read (msgspec would write ``null``);
- a body in UTF-16 or UTF-32, or with a UTF-8 byte order mark, which ``json.loads`` detects;
- a string holding a lone surrogate (written ASCII-escaped, as before).

Values may be written differently from :mod:`json`'s spelling only where JSON leaves the
choice open: ``1e-7`` for ``1e-07``. :func:`use_fast` turns msgspec off for the whole
process (the CLI does when ``MCP_RESUME_PROXY_SPEEDUPS=off``); the tests run both ways.
"""

from __future__ import annotations

import json
import math
from typing import Any

try:
    import msgspec
except ImportError:  # the [fast] extra is not installed: the standard library alone
    msgspec = None  # type: ignore[assignment]


class Special(float):
    """``NaN`` or ``±Infinity`` as the standard library read it: written back the same way."""


def _float(text: str) -> float:
    value = float(text)
    return value if math.isfinite(value) else Special(value)


def _stdlib_encode(obj: Any) -> bytes:
    try:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:  # a lone surrogate: the same JSON value, ASCII-escaped
        return json.dumps(obj, separators=(",", ":")).encode()


if msgspec is not None:
    _DECODER = msgspec.json.Decoder()
    # What msgspec does not write itself (Special, str and float subclasses such as a
    # StrEnum) is written by the standard library, spelled as it always was.
    _ENCODER = msgspec.json.Encoder(enc_hook=lambda obj: msgspec.Raw(_stdlib_encode(obj)))
    _DECODE_REFUSED: tuple[type[Exception], ...] = (msgspec.DecodeError, UnicodeEncodeError)
    _ENCODE_REFUSED: tuple[type[Exception], ...] = (
        msgspec.EncodeError,
        TypeError,
        ValueError,
        OverflowError,
        UnicodeEncodeError,
    )

_fast = msgspec is not None


def available() -> bool:
    """Whether msgspec is installed."""
    return msgspec is not None


def use_fast(on: bool) -> bool:
    """Use msgspec (when installed) or only the standard library; what is in use now."""
    global _fast
    _fast = on and msgspec is not None
    return _fast


def fast() -> bool:
    """Whether msgspec is in use."""
    return _fast


def loads(data: bytes | str) -> Any:
    """Decode JSON text; raises what ``json.loads`` raises on what is not JSON."""
    if _fast:
        try:
            return _DECODER.decode(data)
        except _DECODE_REFUSED:
            pass  # the standard library decides, and words the error
        return json.loads(data, parse_constant=Special, parse_float=_float)
    return json.loads(data)


def dumps(obj: Any) -> bytes:
    """Compact JSON on one line (never a newline), UTF-8, non-ASCII characters as they are."""
    if _fast:
        try:
            return _ENCODER.encode(obj)
        except _ENCODE_REFUSED:
            pass  # (a non-string key, …): the standard library writes it, or raises
    return _stdlib_encode(obj)
