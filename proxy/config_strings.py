"""Strings a config may hold that the system cannot carry: what ``check`` and the start
refuse, naming the key path and never the value (an ``env`` value or a header is most
often a credential). A NUL character, which no argument, variable, path or header can
carry, is refused in every string of a config (:func:`proxy.config_rules.convert`):
``execve`` takes C strings, and Python raised ``ValueError: embedded null byte`` when a
server process started, which was every ``initialize`` failing with HTTP 500 while
``check`` said ok. Here the rest:

- A server process's ``env``: a variable's name is non-empty and without ``=``.
- An upstream's ``headers`` (after ``${NAME}`` interpolation): the name an HTTP token
  (RFC 9110 §5.6.2), the value without control characters but tab (§5.5: a line break
  would end the header and start another).
"""

from __future__ import annotations

import re

from proxy.config_rules import ConfigError

_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def env_problems(env: dict[str, str], where: str) -> list[str]:
    """Why a server process cannot be given the variables ``env`` (``where``: the key
    path of the upstream), or nothing."""
    if any(not name or "=" in name or "\0" in name for name in env):
        return [f"{where}.env: a variable's name must be non-empty, without '=' or NUL"]
    return []


def check_header(name: str, value: str, where: str) -> None:
    """``ConfigError`` when the header ``name: value`` cannot be sent (``where``: the
    key path of the headers, ``upstream.headers``). Neither is shown: a header name may
    be a whole ``Authorization: Bearer ...`` line put where its name belongs."""
    if not _HEADER_NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: a header name is letters, digits and !#$%&'*+-.^_`|~ (not shown)"
        )
    if _HEADER_CONTROL.search(value):
        raise ConfigError(
            f"{where}.{name}: holds a line break or another control character, which a "
            f"header cannot (the value is not shown)"
        )
