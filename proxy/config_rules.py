"""The machinery under :mod:`proxy.config`: bounds and choices on fields, environment
interpolation, and building typed dataclasses from YAML data with every error naming its
key path. Nothing here knows the schema itself."""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any


class ConfigError(Exception):
    """The configuration is invalid; the message starts with the key path."""


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


def interpolated(data: Any, path: str) -> Any:
    """Every string of a config mapping interpolated, except upstreams' ``headers``
    (``upstream.headers``, ``servers.NAME.headers``): those are resolved when the upstream
    starts, so that no secret sits in the config object."""
    if isinstance(data, dict):
        return {
            k: v if _kept_for_start(f"{path}.{k}".lstrip(".")) else interpolated(v, f"{path}.{k}")
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [interpolated(v, f"{path}[{i}]") for i, v in enumerate(data)]
    if isinstance(data, str):
        return interpolate(data, path.lstrip("."))
    return data


def _kept_for_start(path: str) -> bool:
    parts = path.split(".")
    return parts == ["upstream", "headers"] or (
        len(parts) == 3 and parts[0] == "servers" and parts[2] == "headers"
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


def describe(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"


def convert(path: str, tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin is Annotated:  # a type with its bounds: Annotated[float, Positive]
        inner, *rules = typing.get_args(tp)
        converted = convert(path, inner, value)
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
        return convert(path, inner, value)
    if dataclasses.is_dataclass(tp):
        return build(path, tp, value)
    if origin is list:
        (item,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{path}: expected a list, got {describe(value)}")
        return [convert(f"{path}[{i}]", item, v) for i, v in enumerate(value)]
    if origin is dict:
        _, item = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {describe(value)}")
        return {str(k): convert(f"{path}.{k}", item, v) for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {describe(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {describe(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}: expected a number, got {describe(value)}")
        return float(value)
    if tp is str:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ConfigError(f"{path}: expected a string, got {describe(value)}")
        return str(value)
    raise ConfigError(f"{path}: unsupported type {tp!r}")  # pragma: no cover


def build(prefix: str, cls: Any, data: Any) -> Any:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {describe(data)}")
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in dataclasses.fields(cls)]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if key not in names:
            raise ConfigError(f"{path}: unknown key (known here: {', '.join(names)})")
        kwargs[key] = convert(path, hints[key], value)
    return cls(**kwargs)
