"""A legacy server's JSON-RPC error in 2026-07-28 terms, for a modern client: pure.

The pool's servers speak 2025-11-25 or earlier; their errors carry that era's codes. The
2026-07-28 revision retires two of them (basic/index.mdx §Error Codes: "Implementations of
this protocol version MUST NOT emit these codes"):

- ``-32002`` resource not found, replaced by ``-32602`` Invalid Params
  (server/resources.mdx §Error Handling; changelog item 6, SEP-2164). Translated here.
- ``-32042`` URL elicitation required (2025-11-25 only). 2026-07-28 has no error code for
  it: its place is taken by an ``input_required`` result carrying URL-mode
  ``elicitation/create`` requests (client/elicitation.mdx §URL Mode Flow), which is a
  different answer, not a code. :mod:`proxy.core.url_elicit` builds that answer for a
  client that declared ``elicitation.url`` (and sends the request again once it accepts);
  in any other case it is passed through as the server sent it (docs/modern.md §Checks
  and errors).

Every other code is passed through: the JSON-RPC ones mean the same in both eras, and
2026-07-28 says receivers must assume nothing of the legacy server range. A legacy client
gets the server's error untouched (this module is only called on the modern side).
"""

from __future__ import annotations

from typing import Any, Final

from proxy.core.protocol import INVALID_PARAMS

RESOURCE_NOT_FOUND_2025: Final = -32002
URL_ELICITATION_REQUIRED: Final = -32042

MODERN_CODES: Final[dict[int, int]] = {RESOURCE_NOT_FOUND_2025: INVALID_PARAMS}
"""A 2025-era code → the code 2026-07-28 gives the same condition."""

UPSTREAM_CODE: Final = "upstreamCode"
"""Key in ``error.data`` keeping the server's own code when it was translated: the modern
code alone (-32602) no longer tells a resource the server did not find from a request it
found malformed, and an operator comparing with the server's logs sees the code it logged."""


def modern_error(error: Any) -> Any:
    """``error`` (a JSON-RPC error object) with its code in 2026-07-28 terms.

    Translated: the code, from :data:`MODERN_CODES`; the server's code kept in
    ``data[UPSTREAM_CODE]`` when ``data`` is absent or an object (any other ``data`` is
    left as the server sent it). Anything else, malformed objects included, unchanged.
    """
    if not isinstance(error, dict):
        return error
    code = error.get("code")
    if type(code) is not int or code not in MODERN_CODES:
        return error
    out = dict(error)
    out["code"] = MODERN_CODES[code]
    data = error.get("data")
    if data is None:
        out["data"] = {UPSTREAM_CODE: code}
    elif isinstance(data, dict):
        out["data"] = {**data, UPSTREAM_CODE: code}
    return out
