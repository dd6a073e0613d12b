"""A config checked against the machine it runs on: what no schema can know.

- ``store.kind: sqlite``: the database's directory must exist and this user must be able
  to create files in it (SQLite writes ``-wal`` and ``-shm`` files beside the database,
  the proxy its ``.lock``), and an existing database or lock file must be readable and
  writable. Checked by ``check`` and at start, before the store opens: a refusal names
  ``store.path`` and the user, with the config error's exit status (2), not SQLite's
  "unable to open database file".
- Each stdio upstream's program (``command[0]``), checked by ``check`` only. A program
  named by a path (it holds a ``/``; a relative one is taken from ``cwd``, else the
  directory the proxy runs in) that is missing or not executable is an error: the
  proxy could never start it. A bare name not found on the ``PATH`` the server would get
  (``upstream.env``'s ``PATH``, else the proxy's own with ``inherit_env``, else the
  system default) is a warning: the proxy's environment at run time (a container, a
  service manager) may differ from the shell that runs ``check``. So is a ``cwd`` that is
  not a directory here.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from proxy.config import Config
from proxy.config_oauth import default_token_file
from proxy.config_rules import ConfigError, Problems
from proxy.config_sections import StoreConfig
from proxy.config_upstream import UpstreamConfig


def _where(path: Path) -> str:
    return str(path) if path.is_absolute() else f"{path} (that is {Path.cwd() / path})"


def check_store_path(store: StoreConfig) -> None:
    """``ConfigError`` when this user cannot open a SQLite store at ``store.path``."""
    if store.kind != "sqlite":
        return
    given = Path(store.path)
    path = given if given.is_absolute() else Path.cwd() / given
    directory = path.parent
    user = f"this user (uid {os.geteuid()})"
    try:
        if not directory.is_dir():
            raise ConfigError(
                f"store.path: {_where(given)}: the directory {directory} does not exist"
            )
        if path.is_dir():
            raise ConfigError(f"store.path: {_where(given)} is a directory; name a file in it")
    except PermissionError:
        raise ConfigError(
            f"store.path: {_where(given)}: {user} cannot reach the directory {directory}"
        ) from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ConfigError(
            f"store.path: {_where(given)}: {user} cannot create files in {directory} "
            f"(SQLite keeps its -wal and -shm files beside the database); choose a "
            f"directory it owns"
        )
    for file in (path, path.with_name(path.name + ".lock")):
        if file.exists() and not os.access(file, os.R_OK | os.W_OK):
            raise ConfigError(f"store.path: {user} cannot read and write {file}")


def _search_path(up: UpstreamConfig) -> str:
    """The ``PATH`` the server process will be looked up with (upstream/stdio.py's env)."""
    env = dict(os.environ) if up.inherit_env else {}
    env.update(up.env)
    return os.pathsep.join(os.get_exec_path(env))


def check_command(up: UpstreamConfig, where: str, problems: Problems) -> None:
    """Whether ``up``'s program can be started from here (see the module's rules)."""
    if not up.command:
        return
    try:
        program = up.resolved_command(where)[0]
    except ConfigError:
        return  # named by check already
    cwd = Path(up.cwd) if up.cwd else None
    if cwd is not None and not cwd.is_dir():
        problems.warning(f"{where}.cwd: {up.cwd} is not a directory here")
        cwd = None
    if "/" in program:
        path = Path(program)
        found = path if path.is_absolute() or cwd is None else cwd / path
        if not found.is_file():
            problems.error(f"{where}.command[0]: {_where(found)} does not exist")
        elif not os.access(found, os.X_OK):
            problems.error(f"{where}.command[0]: {_where(found)} is not executable")
        return
    if shutil.which(program, path=_search_path(up)) is None:
        problems.warning(
            f"{where}.command[0]: {program} is not on PATH here; the server cannot start "
            f"unless the proxy's environment has it"
        )


def check_system(config: Config, problems: Problems) -> None:
    """Every check of this module on ``config``, collected in ``problems``."""
    with problems.collecting():
        check_store_path(config.store)
    for name, up in config.upstreams().items():
        where = f"servers.{name}" if config.servers else "upstream"
        check_command(up, where, problems)
        if up.stop_idle_seconds is not None and up.kind != "stdio":
            problems.warning(
                f"{where}.stop_idle_seconds: ignored for a {up.kind} server (only a stdio "
                f"server has a process of its own to stop)"
            )


def check_signed_in(name: str, up: UpstreamConfig, where: str, problems: Problems) -> None:
    """``oauth.grant: authorization_code`` without a token file here: until someone runs
    ``login``, the server's sessions are refused (a warning: it may be done where the
    proxy runs)."""
    path = Path(up.oauth.token_file) if up.oauth.token_file else default_token_file(name)
    if not path.exists():
        login = "mcp-resume-proxy login" + ("" if where == "upstream" else f" {name}")
        problems.warning(
            f"{where}.oauth: no token file at {path} yet: run `{login}` before clients come"
        )


TOKEN_SECRET_ENV = "MCP_RESUME_PROXY_TOKEN_SECRET"


def token_secret(config: Config) -> bytes:
    """The resume-token HMAC key: config, else environment, else random for this run.

    A random key is right for the in-memory store: tokens need not outlive the streams
    they name, and those die with the process. A persistent store's streams outlive it,
    so their tokens must too: without a configured key, ``ConfigError``.
    """
    configured = config.streams.token_secret or os.environ.get(TOKEN_SECRET_ENV)
    if configured:
        return configured.encode()
    if config.store.kind != "memory":
        raise ConfigError(
            f"store.kind: {config.store.kind} keeps streams across restarts and replicas, so "
            f"resume tokens must be signed with a key that outlives this process: set "
            f"streams.token_secret (16+ characters) or {TOKEN_SECRET_ENV}"
        )
    return secrets.token_bytes(32)
