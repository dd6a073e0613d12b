"""``config/README.md``, generated from the schema in :mod:`proxy.config`: every key, its
type and bounds, its default, and the comment written above its field.

Regenerate with ``python -m proxy.config_doc > config/README.md``; a test fails when the
file and the schema disagree.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
import types
import typing
from collections.abc import Iterator
from typing import Annotated, Any

from proxy.config import Bound, Config, OneOf

_FIELD = re.compile(r"^\s{4}(\w+):")

HEADER = """\
# Configuration reference

Generated from `proxy/config.py` by `python -m proxy.config_doc > config/README.md`
(a test keeps the two in step). Every key, with its type, its bounds and its default.
`config/local-stdio.yaml` sets every key to its default; the other files here are examples
of the uses in the README. `mcp-resume-proxy check FILE` validates a file without starting
anything. In any string value, `${NAME}` and `${NAME:-default}` are read from the
environment (`$${` is a literal `${`); `upstream.headers` are read when an upstream starts.
"""


def _comments(cls: Any) -> dict[str, str]:
    """The ``#`` lines written right above each field of ``cls``, joined."""
    found: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(cls).splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        match = _FIELD.match(line)
        if match and pending and not stripped.startswith(("def ", "@")):
            found[match.group(1)] = " ".join(pending)
        pending = []
    return found


def _type_name(tp: Any) -> tuple[str, str]:
    """(type, bounds or choices) of an annotated field type."""
    rules: tuple[Any, ...] = ()
    if typing.get_origin(tp) is Annotated:
        tp, *rest = typing.get_args(tp)
        rules = tuple(rest)
    limits = []
    for rule in rules:
        if isinstance(rule, Bound):
            low = f"> {rule.low:g}" if not rule.low_allowed else f"≥ {rule.low:g}"
            limits.append(low if rule.high is None else f"{rule.low:g}..{rule.high:g}")
        elif isinstance(rule, OneOf):
            limits.append(" \\| ".join(f"`{c}`" for c in rule.choices))
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        name = f"{_type_name(inner[0])[0]} or null"
    elif origin is list:
        name = f"list of {_type_name(typing.get_args(tp)[0])[0]}"
    elif origin is dict:
        name = f"mapping to {_type_name(typing.get_args(tp)[1])[0]}"
    else:
        name = getattr(tp, "__name__", str(tp))
    return name, ", ".join(limits)


def _rows(cls: Any, prefix: str = "") -> Iterator[tuple[str, str, str, str, str]]:
    hints = typing.get_type_hints(cls, include_extras=True)
    notes = _comments(cls)
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            yield from _rows(tp, f"{path}.")
            continue
        default = f.default_factory() if callable(f.default_factory) else f.default
        name, limits = _type_name(tp)
        shown = json.dumps(default)
        yield path, name, limits, shown, notes.get(f.name, "")
        item = typing.get_args(tp)[0] if typing.get_origin(tp) is list else None
        if dataclasses.is_dataclass(item):  # a list of sections: each item's keys
            yield from _rows(item, f"{path}[].")


def render() -> str:
    lines = [HEADER]
    section = None
    for path, name, limits, default, note in _rows(Config):
        top = path.split(".")[0]
        if top != section:
            section = top
            cls = type(getattr(Config(), top))
            doc = (cls.__doc__ or "").strip().replace("\n", " ")
            doc = re.sub(r"\s+", " ", doc)
            lines += ["", f"## `{top}`", ""]
            if doc and not doc.startswith(f"{cls.__name__}("):  # not the generated one
                lines += [doc, ""]
            lines += ["| key | type | bounds | default | what it does |", "|---|---|---|---|---|"]
        cell = note.replace("|", "\\|")
        lines.append(f"| `{path}` | {name} | {limits} | `{default}` | {cell} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
