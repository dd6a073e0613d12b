"""A legacy server's "URL elicitation required" (-32042) as 2026-07-28 MRTR: pure.

A 2025-11-25 server that cannot go on until the user visits a URL answers the request
with ``-32042`` and the URL-mode elicitations in ``error.data.elicitations``
(``URLElicitationRequiredError``, 2025-11-25 client/elicitation.mdx §Error Handling); its
client retries the request once the user went there. 2026-07-28 retires the code
(basic/index.mdx §Error Codes) and asks with an ``input_required`` result carrying
URL-mode ``elicitation/create`` input requests instead (client/elicitation.mdx §URL Mode
Flow); the client's retry carries ``action: "accept"`` once the user consented.

:func:`url_round` makes that translation: the ended call becomes a new, unsent call
waiting on one input request per elicitation. When the client accepts them all it is sent
to the server again, as the same request (:attr:`proxy.core.call.Call.unsent`); a
declined or dismissed one ends it (:func:`proxy.core.call.url_refused`). Only for a client
that declared ``elicitation.url`` on the request (client/elicitation.mdx §Capabilities: an
empty ``elicitation`` object means form mode only), on a request that may carry input, for
at most :data:`MAX_URL_ROUNDS` rounds: otherwise the error passes through as the server
sent it.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.core.call import ASKING, Call, CallStatus
from proxy.core.modern_errors import URL_ELICITATION_REQUIRED

MAX_URL_ROUNDS: Final = 3
"""How many -32042 answers one request is turned into ``input_required`` (a server that
never stops asking must not hold a client forever): the next one passes through."""


def declares_url(call: Call) -> bool:
    elicitation = call.client.capabilities.get("elicitation")
    return isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict)


def url_elicitations(error: Any) -> list[dict[str, Any]] | None:
    """The valid URL-mode elicitations of a -32042 error object, or None (not one, or a
    malformed one: none or an entry without a string ``url`` and ``message``)."""
    if not isinstance(error, dict) or error.get("code") != URL_ELICITATION_REQUIRED:
        return None
    data = error.get("data")
    found = data.get("elicitations") if isinstance(data, dict) else None
    if not isinstance(found, list) or not found:
        return None
    for item in found:
        if not isinstance(item, dict) or item.get("mode", "url") != "url":
            return None
        if not isinstance(item.get("url"), str) or not isinstance(item.get("message"), str):
            return None
    return found


def url_round(call: Call) -> Call | None:
    """The call that asks ``call``'s client the URL elicitations its server's -32042
    requires, or None when ``call`` did not end that way or it is not translated."""
    if call.status is not CallStatus.FAILED or call.method not in ASKING or not call.outcome:
        return None
    if call.task_id is not None or call.url_rounds >= MAX_URL_ROUNDS or not declares_url(call):
        return None
    found = url_elicitations(call.outcome.get("error"))
    if found is None:
        return None
    # 2026-07-28's ElicitRequestURLParams is mode, message, url: the legacy elicitationId
    # (no 2026 place) names the input request's key instead, when it is free.
    requests = [
        {
            "method": "elicitation/create",
            "params": {"mode": "url", "message": item["message"], "url": item["url"]},
        }
        for item in found
    ]
    hints = [item.get("elicitationId") for item in found]
    fresh = Call(call.method, call.params, call.client, call.principal)
    fresh.url_rounds = call.url_rounds + 1
    fresh.task_support = call.task_support
    fresh.await_url(requests, hints)
    return fresh
