"""Reading a config file into data: YAML, or strict JSON for a ``.json`` file.

A ``.json`` file is most often an ``mcpServers`` file a desktop host reads too, and hosts
parse strict JSON (Claude Desktop, Cursor, VS Code's ``mcp.json`` …): a trailing comma, a
comment, a single-quoted string or ``NaN`` makes the host drop the file. A YAML parser
would take all of these (JSON is nearly YAML), so ``.json`` is read with the JSON parser,
and the proxy refuses what the host would.

Every file the proxy reads as config (the main config, an ``mcpServers`` file,
``auth.tokens_file``) goes through :func:`parse_yaml` or :func:`parse_json`:

- An error says where (line and column) and what kind of error, never quoting the file's
  text: it may hold a secret. (PyYAML's own message quotes the line; its ``problem``
  quotes an alias, a tag or a character, which are left out too.)
- What it builds is bounded: at most :data:`MAX_FILE_BYTES` of text, nesting at most
  :data:`MAX_DEPTH` deep, at most :data:`MAX_VALUES` values once every alias is expanded
  (a 400-byte "billion laughs" of nested aliases would expand to billions: each later
  step copies what an alias names), and no alias inside the node it names (a cycle).
  Past a bound it is a config error (exit 2), found before anything is expanded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

from proxy.config_rules import ConfigError

MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 32  # a config's deepest key is ~5 levels down (servers.NAME.env.KEY)
MAX_VALUES = 100_000  # every mapping, list, key and value, aliases expanded


class Unreadable(ValueError):
    """The text is not a config's data: why, in a few words, never quoting it."""


def read_config_file(path: str | Path) -> Any:
    """The data of the config file ``path``; ``ConfigError`` when it cannot be read or
    is not valid YAML (or, for ``.json``, strict JSON)."""
    try:
        text = read_bounded(path)
    except Unreadable as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from None
    json_file = str(path).lower().endswith(".json")
    try:
        return parse_json(text) if json_file else parse_yaml(text)
    except Unreadable as exc:
        raise ConfigError(f"{path}: {exc}") from None


def read_bounded(path: str | Path) -> str:
    """The text of the file ``path`` (at most :data:`MAX_FILE_BYTES`); ``Unreadable``
    saying why not, never quoting the file."""
    try:
        with Path(path).open("rb") as file:
            raw = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise Unreadable(exc.strerror or type(exc).__name__) from None
    except ValueError:  # a NUL in the path
        raise Unreadable("not a path") from None
    if len(raw) > MAX_FILE_BYTES:
        raise Unreadable(f"larger than {MAX_FILE_BYTES} bytes")
    try:
        return raw.decode()
    except UnicodeDecodeError:
        raise Unreadable("not UTF-8 text") from None


# ----------------------------------------------------------------------------- YAML
class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing nesting past :data:`MAX_DEPTH` as it composes (its
    composer recurses: 1000 levels would end in a ``RecursionError``), and saying where
    a value cannot be built (a timestamp ``2024-13-01``, an integer of 5000 digits)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, OverflowError):
            problem = "a value that cannot be read as its type"
            raise ConstructorError(None, None, problem, node.start_mark) from None


# A quoted part of PyYAML's problem: shown when it is punctuation ("expected ',' or
# '}'"), a token's name ('<block end>') or an escape ('\t'), else it may be the file's.
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_HARMLESS = re.compile(r"<[a-z ]+>|[^\w\s]{1,3}|\\[a-z0-9]{1,9}")


def _kind(problem: str | None) -> str:
    if not problem:
        return ""
    shown = _QUOTED.sub(
        lambda m: m.group(0) if _HARMLESS.fullmatch(m.group(0)[1:-1]) else "(not shown)",
        problem,
    )
    return f": {shown}"


def parse_yaml(text: str) -> Any:
    """The data of the YAML ``text`` (PyYAML's safe types), bounded; ``Unreadable``
    saying where and what kind of error, never quoting the text."""
    loader = None
    try:
        loader = _BoundedLoader(text)  # its reader refuses a control character at once
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise Unreadable(f"not valid YAML{at}{_kind(exc.problem)}") from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        raise Unreadable(
            f"not valid YAML (line {line}, column {column}): a character YAML does not "
            f"allow (#x{exc.character:04x})"
            if isinstance(exc.character, int)
            else f"not valid YAML (line {line}, column {column}): not readable text"
        ) from None
    except yaml.YAMLError:
        raise Unreadable("not valid YAML") from None
    except RecursionError:  # pragma: no cover - compose_node stops nesting first
        raise Unreadable(f"not valid YAML: nested deeper than {MAX_DEPTH} levels") from None
    finally:
        if loader is not None:
            loader.dispose()
    try:
        check_shape(data)
    except Unreadable as exc:
        raise Unreadable(f"not valid YAML: {exc}") from None
    return data


# ----------------------------------------------------------------------------- JSON
def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_json(text: str) -> Any:
    """The data of the strict JSON ``text``, bounded; ``Unreadable`` saying where and
    what, never quoting the text."""
    strict = "hosts read strict JSON: no comments, no trailing commas, double quotes only"
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise Unreadable(
            f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); {strict}"
        ) from None
    except ValueError as exc:  # NaN, Infinity; an integer of over 4300 digits
        raise Unreadable(f"not valid JSON ({exc}); hosts read strict JSON") from None
    except RecursionError:
        raise Unreadable(f"not valid JSON: nested deeper than {MAX_DEPTH} levels") from None
    try:
        check_shape(data)
    except Unreadable as exc:
        raise Unreadable(f"not valid JSON: {exc}") from None
    return data


# ----------------------------------------------------------------------------- shape
def check_shape(data: Any) -> None:
    """``Unreadable`` when ``data`` nests deeper than :data:`MAX_DEPTH`, holds itself (a
    YAML alias inside its anchor), or counts more than :data:`MAX_VALUES` values with
    every alias expanded. Walks each distinct node once (no recursion, no expansion): a
    node named by many aliases is counted by the size found the first time."""
    if not isinstance(data, dict | list):
        return
    sizes: dict[int, int] = {}  # id → expanded size, of the containers walked
    on_path: set[int] = {id(data)}
    # Each frame: the container, its children still to walk, its size so far.
    stack: list[tuple[Any, Any, list[int]]] = [(data, _children(data), [_own(data)])]
    while stack:
        node, children, total = stack[-1]
        for child in children:
            if not isinstance(child, dict | list):
                total[0] += 1
            elif id(child) in on_path:
                raise Unreadable("an alias refers to a node that holds it")
            elif id(child) in sizes:
                total[0] += sizes[id(child)]
            else:
                if len(stack) >= MAX_DEPTH:
                    raise Unreadable(f"nested deeper than {MAX_DEPTH} levels")
                on_path.add(id(child))
                stack.append((child, _children(child), [_own(child)]))
                break
            if total[0] > MAX_VALUES:
                raise _too_many()
        else:
            stack.pop()
            on_path.discard(id(node))
            sizes[id(node)] = total[0]
            if stack:
                stack[-1][2][0] += total[0]
                if stack[-1][2][0] > MAX_VALUES:
                    raise _too_many()


def _children(node: dict[Any, Any] | list[Any]) -> Any:
    return iter(node.values() if isinstance(node, dict) else node)


def _own(node: dict[Any, Any] | list[Any]) -> int:
    """The node itself, and a mapping's keys."""
    return 1 + (len(node) if isinstance(node, dict) else 0)


def _too_many() -> Unreadable:
    return Unreadable(
        f"more than {MAX_VALUES} values with every alias expanded "
        f"(aliases that name aliases multiply)"
    )
