"""The machinery under :mod:`proxy.config`: bounds and choices on fields, environment
interpolation, and building typed dataclasses from YAML data with every error naming its
key path. Nothing here knows the schema itself."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit, urlunsplit


class ConfigError(Exception):
    """The configuration is invalid: one message per problem, each starting with its key
    path (``str()`` joins them, one a line)."""

    def __init__(self, *messages: str) -> None:
        super().__init__("\n".join(messages))
        self.messages = list(messages)


def key_path(message: str) -> str:
    """The key path a problem's message starts with (``listen.port`` of
    ``listen.port: must be ...``)."""
    return message.partition(": ")[0]


def _holds(outer: str, inner: str) -> bool:
    """The key path ``outer`` is ``inner`` or holds it (``upstream``, ``upstream.command[0]``)."""
    return inner == outer or (inner.startswith(outer) and inner[len(outer)] in ".[")


class Problems:
    """Every problem of a config, collected so that one run names them all (``check``).

    A second problem at a key path already named is left out (an unset ``${VAR}`` leaves
    the text as written, which then also fails its type); a rule that a wrong key would
    trip asks :meth:`names` first (once ``upstream.command`` is wrong, ``upstream: no MCP
    server`` is the same slip said again). ``rename`` turns the schema's key paths into
    the file's (``servers.x`` of an ``mcpServers`` file is ``mcpServers.x``): whoever
    reads the file sets it, and every problem added after is named so.
    """

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self.rename: Callable[[str], str] = lambda message: message

    def error(self, message: str) -> None:
        message = self.rename(message)
        if not self._named(message) and message not in self.errors:
            self.errors.append(message)

    def warning(self, message: str) -> None:
        """What may still work where the proxy runs (``check --strict`` fails on it)."""
        message = self.rename(message)
        if not self._named(message):
            self.warnings.append(message)

    def names(self, *paths: str) -> bool:
        """An error names one of the keys ``paths`` (as the schema names them) or a key
        inside one."""
        wanted = [key_path(self.rename(f"{path}: ")) for path in paths]
        return any(_holds(path, key_path(e)) for path in wanted for e in self.errors)

    def _named(self, message: str) -> bool:
        """An error already names this message's key path."""
        path = key_path(message)
        return ": " in message and any(key_path(e) == path for e in self.errors)

    def add(self, exc: ConfigError) -> None:
        for message in exc.messages:
            self.error(message)

    @contextlib.contextmanager
    def collecting(self) -> Iterator[None]:
        """Run a check: the ``ConfigError`` it raises is collected, not raised."""
        try:
            yield
        except ConfigError as exc:
            self.add(exc)

    def raise_any(self) -> None:
        if self.errors:
            raise ConfigError(*self.errors)


# ${NAME}, ${NAME:-default}; $${ is a literal ${.
_ENV_REF = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate(value: str, where: str) -> str:
    """``value`` with ``${NAME}`` and ``${NAME:-default}`` replaced from the environment;
    ``ConfigError`` (naming ``where``) for an unset variable without a default."""

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name, default = match.group(1), match.group(2)
        found = os.environ.get(name)
        if found is not None and (found or default is None):
            return found
        if default is not None:
            return default
        raise ConfigError(f"{where}: environment variable {name} is not set (and no :-default)")

    return _ENV_REF.sub(one, value)


def interpolated(data: Any, path: str, problems: Problems | None = None) -> Any:
    """Every string of a config mapping interpolated, except upstreams' ``headers``
    (``upstream.headers``, ``servers.NAME.headers``), ``command`` and
    ``oauth.client_secret``: those are resolved when the upstream starts, so that no secret
    sits in the config object, and a command is shown (logs, ``/status``) as written.

    Without ``problems``, the first unset variable raises ``ConfigError``; with it, each
    is collected there and its key left out (so it takes its default)."""
    if problems is None:
        problems = Problems()
        done = interpolated(data, path, problems)
        problems.raise_any()
        return done
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            where = f"{path}.{k}"
            if _kept_for_start(where.lstrip(".")):
                out[k] = v
                continue
            try:
                out[k] = _interpolated_leaf(v, where, problems)
            except ConfigError as exc:
                problems.add(exc)
        return out
    if isinstance(data, list):
        out_list = []
        for i, v in enumerate(data):
            try:
                out_list.append(_interpolated_leaf(v, f"{path}[{i}]", problems))
            except ConfigError as exc:
                problems.add(exc)
                out_list.append(v)  # kept as written: indexes stay those of the file
        return out_list
    return _interpolated_leaf(data, path, problems)


def _interpolated_leaf(data: Any, path: str, problems: Problems) -> Any:
    if isinstance(data, str):
        return interpolate(data, path.lstrip("."))
    if isinstance(data, dict | list):
        return interpolated(data, path, problems)
    return data


def _kept_for_start(path: str) -> bool:
    parts = path.split(".")
    if parts[:1] == ["servers"]:
        parts = ["upstream", *parts[2:]] if len(parts) > 2 else parts
    return parts in (
        ["upstream", "headers"],
        ["upstream", "command"],
        ["upstream", "oauth", "client_secret"],
    )


def read_text(path: str) -> str:
    """The text of the file ``path``; ``ValueError`` saying why not, in a few words and
    never quoting the file (it may hold secrets)."""
    try:
        return Path(path).read_text()
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except OSError as exc:
        raise ValueError(exc.strerror or type(exc).__name__) from None


@dataclass(frozen=True)
class Bound:
    """The values a number key may take: ``Annotated[int, Bound(...)]`` on its field."""

    low: float
    high: float | None = None  # None: no upper bound
    low_allowed: bool = True  # False: values must exceed ``low``

    def problem(self, value: float) -> str | None:
        """Why ``value`` is out of bounds (the message after the key path), or None."""
        if self.high is not None and not self.low <= value <= self.high:
            return f"must be {self.low:g}..{self.high:g}, got {value!r}"
        if not self.low_allowed and value <= self.low:
            return f"must be greater than {self.low:g}, got {value!r}"
        if value < self.low:
            at_least = "not be negative" if self.low == 0 else f"be at least {self.low:g}"
            return f"must {at_least}, got {value!r}"
        return None


@dataclass(frozen=True)
class OneOf:
    """The values a string key may take: ``Annotated[str, OneOf(...)]`` on its field."""

    choices: tuple[str, ...]

    def problem(self, value: str) -> str | None:
        return None if value in self.choices else f"must be one of {', '.join(self.choices)}"


Positive = Bound(0, low_allowed=False)
NonNegative = Bound(0)


# Keys that hold secrets, themselves or inside them: a message names a value found there
# by its type, never the value (a token pasted without its "token:" key is a string where
# a mapping was expected), nor an unknown key's name (a token indented one step too far).
_SECRET_KEYS = frozenset(
    {"token", "tokens", "tokens_file", "token_secret", "client_secret", "headers", "env"}
)
_PATH_PARTS = re.compile(r"[.\[\]]")


# An unknown key under a secret key is named only if it looks like a key: shorter than a
# token may be (auth.tokens: 16 characters at least).
_KEY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,14}")


def holds_secret(path: str) -> bool:
    """The key path ``path`` is a secret key or inside one (``auth.tokens[0]``,
    ``upstream.env``, ``servers.x.headers.Authorization``)."""
    return not _SECRET_KEYS.isdisjoint(_PATH_PARTS.split(path))


def shown_url(url: str) -> str:
    """A URL for a message: without user info, query or fragment (each may carry a
    credential: ``redis://:PASSWORD@host``, ``https://h/mcp?token=...``)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "a malformed URL"
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def describe(value: Any, path: str = "") -> str:
    """What was found, for a message: a mapping or list by its size only (it may hold a
    secret), a value at or inside a secret key (``auth.tokens``, ``*.token``,
    ``*.headers``, ``*.env``, …: :func:`holds_secret`) by its type only, else the value
    itself (cut at 60 characters)."""
    if isinstance(value, dict):
        return f"a mapping of {len(value)} key{'s' if len(value) != 1 else ''}"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}"
    if holds_secret(path):
        return f"a {type(value).__name__} (not shown: the key holds a secret)"
    shown = repr(value)
    return f"{type(value).__name__} {shown if len(shown) <= 60 else shown[:57] + '...'}"


def convert(path: str, tp: Any, value: Any) -> Any:
    """``value`` as the type ``tp`` (its bounds checked); ``ConfigError`` names every
    problem in it, each with its key path under ``path``."""
    problems = Problems()
    converted = None
    try:
        converted = _convert(path, tp, value, problems)
    except ConfigError as exc:
        problems.add(exc)
    problems.raise_any()
    return converted


def build(prefix: str, cls: Any, data: Any, problems: Problems | None = None) -> Any:
    """The dataclass ``cls`` from the mapping ``data``. Without ``problems``, a
    ``ConfigError`` names every problem; with it, each is collected there and the key
    takes its default, so the rest is still checked."""
    if problems is None:
        problems = Problems()
        built = build(prefix, cls, data, problems)
        problems.raise_any()
        return built
    try:
        return _build(prefix, cls, data, problems)
    except ConfigError as exc:  # data is not even a mapping
        problems.add(exc)
        return cls()


def _convert(path: str, tp: Any, value: Any, problems: Problems) -> Any:
    """``value`` as ``tp``. A problem with ``value`` itself raises ``ConfigError``; one
    inside it (a list item, a mapping's key) goes to ``problems`` and is left out."""
    origin = typing.get_origin(tp)
    if origin is Annotated:  # a type with its bounds: Annotated[float, Positive]
        inner, *rules = typing.get_args(tp)
        converted = _convert(path, inner, value, problems)
        for rule in rules:
            problem = None if converted is None else rule.problem(converted)
            if problem is not None:
                raise ConfigError(f"{path}: {problem}")
        return converted
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _convert(path, inner, value, problems)
    if dataclasses.is_dataclass(tp):
        return _build(path, tp, value, problems)
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {describe(value, path)}")
        items = []
        for i, v in enumerate(value):
            try:
                items.append(_convert(f"{path}[{i}]", item, v, problems))
            except ConfigError as exc:
                problems.add(exc)
        return items
    if origin is dict:
        _, item = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {describe(value, path)}")
        entries = {}
        for k, v in value.items():
            try:
                entries[str(k)] = _convert(f"{path}.{k}", item, v, problems)
            except ConfigError as exc:
                problems.add(exc)
        return entries
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {describe(value, path)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {describe(value, path)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}: expected a number, got {describe(value, path)}")
        return float(value)
    if tp is str:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ConfigError(f"{path}: expected a string, got {describe(value, path)}")
        if isinstance(value, str) and "\0" in value:
            # No argument, variable, path, host or header can carry one: the process
            # start or the request would fail on every use (the value is not shown).
            raise ConfigError(f"{path}: holds a NUL character, which no string here can")
        return str(value)
    raise ConfigError(f"{path}: unsupported type {tp!r}")  # pragma: no cover


def _build(prefix: str, cls: Any, data: Any, problems: Problems) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        found = describe(data, prefix)
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {found}")
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            if holds_secret(prefix) and not _KEY_NAME.fullmatch(str(key)):
                # The "key" may be a token that lost its own key ("- token: \n  abc…:").
                problems.error(f"{prefix}: an unknown key, not shown (known: {', '.join(names)})")
            else:
                problems.error(f"{path}: unknown key (known here: {', '.join(names)})")
            continue
        try:
            kwargs[key] = _convert(path, hints[key], value, problems)
        except ConfigError as exc:
            problems.add(exc)
    return cls(**kwargs)
