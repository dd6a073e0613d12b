"""Structured logging (structlog): one event name per line, key/value context, to stderr.

``log.format: json`` prints one JSON object per line, for machines. ``console`` prints one
line a person reads: ``TIME LEVEL EVENT key=value ...``, the keys in the order the code
gave them, a nested mapping flattened to dotted keys (``servers.default=http://...``, not
a Python dict), a list joined with commas, and a value quoted (JSON-style, control
characters escaped) only when it holds a space, a quote, ``=`` or a control character,
so that no value can break a line or pass for another key.

A line that cannot be written (stderr's reader gone: a closed pipe, a log shipper that
died; a full disk under a file) is dropped and counted (:func:`dropped_lines`, in
``/metrics`` as ``mcp_resume_proxy_log_lines_dropped``), never raised into the code that
logged it: the proxy's sessions go on without their log, and it resumes once stderr
takes lines again.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

import structlog

_BARE = re.compile(r"[^\s\"'=\\\x00-\x1f\x7f]+")


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    text = value if isinstance(value, str) else str(value)
    return text if _BARE.fullmatch(text) else json.dumps(text, ensure_ascii=False)


def _item(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping | list | tuple):
        return json.dumps(value, default=str, ensure_ascii=False)
    return _scalar(value)


def _pairs(values: Mapping[Any, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from _pairs(value, f"{name}.")
        elif isinstance(value, list | tuple | set | frozenset):
            items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
            yield name, _scalar(",".join(_item(item) for item in items))
        elif isinstance(value, Mapping):
            yield name, "{}"
        else:
            yield name, _scalar(value)


def render_console(_logger: Any, _name: str, event_dict: MutableMapping[str, Any]) -> str:
    """One readable line for an event (its traceback, if any, on the lines after it)."""
    fields = dict(event_dict)
    exception = fields.pop("exception", None)
    head = [
        str(fields.pop("timestamp", "")),
        f"{fields.pop('level', ''):<7}",
        _scalar(fields.pop("event", "")),
    ]
    line = " ".join([*(part for part in head if part.strip()), *map("=".join, _pairs(fields))])
    return f"{line}\n{exception}" if exception else line


_dropped = 0


def dropped_lines() -> int:
    """Log lines this process could not write since it started."""
    return _dropped


class _DroppingLogger(structlog.PrintLogger):
    """structlog's PrintLogger, but a write that fails drops its line (module doc)."""

    def msg(self, message: str) -> None:
        global _dropped
        try:
            super().msg(message)
        except (OSError, ValueError):  # (ValueError: stderr was closed)
            _dropped += 1

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


def _logger(*_args: Any) -> _DroppingLogger:
    return _DroppingLogger(sys.stderr)


def configure_logging(fmt: str = "console", level: str = "info") -> None:
    renderers: list[structlog.typing.Processor]
    if fmt == "json":
        renderers = [structlog.processors.JSONRenderer()]
    else:
        renderers = [structlog.processors.format_exc_info, render_console]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *renderers,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=_logger,
        cache_logger_on_first_use=False,
    )
