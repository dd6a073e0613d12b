"""Reading a config file into data: YAML, or strict JSON for a ``.json`` file.

A ``.json`` file is most often an ``mcpServers`` file a desktop host reads too, and hosts
parse strict JSON (Claude Desktop, Cursor, VS Code's ``mcp.json`` …): a trailing comma, a
comment, a single-quoted string or ``NaN`` makes the host drop the file. A YAML parser
would take all of these (JSON is nearly YAML), so ``.json`` is read with the JSON parser,
and the proxy refuses what the host would. Errors say where (line and column) and what,
never quoting the file's text: it may hold a secret.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from proxy.config_rules import ConfigError


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def read_config_file(path: str | Path) -> Any:
    """The data of the config file ``path``; ``ConfigError`` when it cannot be read or
    is not valid YAML (or, for ``.json``, strict JSON)."""
    try:
        text = Path(path).read_text()
    except UnicodeDecodeError:
        raise ConfigError(f"cannot read config file {path}: not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    if str(path).lower().endswith(".json"):
        return _strict_json(text, path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        what = f": {problem}" if problem else ""
        raise ConfigError(f"{path}: not valid YAML{at}{what}") from None


def _strict_json(text: str, path: str | Path) -> Any:
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            f"hosts read strict JSON: no comments, no trailing commas, double quotes only"
        ) from None
    except ValueError as exc:  # NaN, Infinity
        raise ConfigError(f"{path}: not valid JSON ({exc}); hosts read strict JSON") from None
