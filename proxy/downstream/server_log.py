"""aiohttp's own log and answer for a request it could not parse, made quiet.

A request aiohttp refuses before the app sees it (headers past its 8190-byte line limit,
an invalid header, a bad request line) gets ``400``, and aiohttp logs the exception at
ERROR with a traceback whose message quotes the offending bytes: the first ~100
characters of a too-long ``Authorization`` value (a JWT's header and claims), a request
line with its query. :data:`SERVER_LOG` is the logger the proxy gives aiohttp
(``AppRunner(logger=...)``, its documented parameter): such a record is dropped and a
``request_malformed`` event logged instead, naming the peer, the status and the kind of
error, never the bytes. Any other record of aiohttp's passes as it was.

aiohttp's ``400`` answer quotes the same bytes in its body, which clients put in their
errors (the TypeScript SDK's ``Error POSTing to endpoint (HTTP 400): ...``) and hosts in
their logs: :func:`quiet_refusal` replaces it with a fixed text, before aiohttp writes it.
"""

from __future__ import annotations

import logging

import structlog
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler, _ErrInfo

log = structlog.get_logger("proxy.http")


class _MalformedRequests(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if not isinstance(error, HttpProcessingError):
            return True
        peer = record.args[0] if isinstance(record.args, tuple) and record.args else None
        log.info(
            "request_malformed",
            peer=peer if isinstance(peer, str) else None,
            status=error.code,
            error=type(error).__name__,  # LineTooLong, InvalidHeader, BadStatusLine, ...
        )
        return False


SERVER_LOG = logging.getLogger("proxy.http.aiohttp")
SERVER_LOG.addFilter(_MalformedRequests())


# aiohttp keeps the refusal it will answer in its queue of parsed messages (no public
# hook replaces its text); guard.py checks that this slot exists when it starts.
QUEUE_SLOT = "_messages"
_TOO_LONG = "Bad Request: a header or the request line is longer than 8190 bytes"
_MALFORMED = "Bad Request: the request line or a header could not be parsed"


def quiet_refusal(handler: RequestHandler) -> None:
    """Replace the text of each refusal aiohttp's parser queued on ``handler`` (it quotes
    the request's bytes) with a fixed one, its status kept."""
    queue = getattr(handler, QUEUE_SLOT)
    for i, (message, payload) in enumerate(queue):
        if isinstance(message, _ErrInfo) and message.message not in (_TOO_LONG, _MALFORMED):
            text = _TOO_LONG if isinstance(message.exc, LineTooLong) else _MALFORMED
            queue[i] = (_ErrInfo(status=message.status, exc=message.exc, message=text), payload)
