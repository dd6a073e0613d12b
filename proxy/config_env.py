"""The settings the environment gives (``MCP_RESUME_PROXY_*``), over the config file's:
what the proxy reads before its command-line flags, and all that ``health`` reads.

Kept apart from :mod:`proxy.cli` so that ``health`` (a container's ``HEALTHCHECK``, run
every interval) and ``example`` load the schema, not the server's libraries.
"""

from __future__ import annotations

import os

from proxy.config import Config, ConfigError, load_config, override
from proxy.config_sections import DRAIN_SECONDS_MAX

ENV_PREFIX = "MCP_RESUME_PROXY_"


def env(name: str) -> str | None:
    value = os.environ.get(ENV_PREFIX + name)
    return value if value else None


def env_drain_seconds() -> float | None:
    """``MCP_RESUME_PROXY_DRAIN_SECONDS`` (it wins over ``listen.drain_seconds``), if set."""
    given = env("DRAIN_SECONDS")
    if given is None:
        return None
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= DRAIN_SECONDS_MAX:  # also NaN
        raise ConfigError(
            f"{ENV_PREFIX}DRAIN_SECONDS: expected seconds 0..{DRAIN_SECONDS_MAX:g}, got {given!r}"
        )
    return seconds


def env_speedups() -> bool:
    """``MCP_RESUME_PROXY_SPEEDUPS``: ``on`` (the default: msgspec reads and writes JSON
    when it is installed, the ``[fast]`` extra) or ``off`` (the standard library only)."""
    given = env("SPEEDUPS")
    if given is None or given.lower() == "on":
        return True
    if given.lower() == "off":
        return False
    raise ConfigError(f"{ENV_PREFIX}SPEEDUPS: expected on or off, got {given!r}")


def settings_from_file_and_env(config_path: str | None) -> Config:
    """Defaults < config file (``config_path``, else ``MCP_RESUME_PROXY_CONFIG``) <
    environment: what the proxy reads before its flags (``health`` reads the same)."""
    config_path = config_path or env("CONFIG")
    config = load_config(config_path) if config_path else Config()
    env_port = env("PORT")
    if env_port is not None:
        if not env_port.isdigit():
            raise ConfigError(f"MCP_RESUME_PROXY_PORT: expected a port number, got {env_port!r}")
        config = override(config, "listen", port=int(env_port))
    config = override(config, "listen", host=env("HOST"))
    config = override(config, "log", format=env("LOG_FORMAT"), level=env("LOG_LEVEL"))
    return override(config, "listen", drain_seconds=env_drain_seconds())
