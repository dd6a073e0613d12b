"""Where an upstream's OAuth tokens are kept between runs: one JSON file per server, that
only the proxy's user can read (mode 0600 in a folder of mode 0700), written whole and
atomically (a temporary file renamed over it), so a reader never sees half of one.

``mcp-resume-proxy login NAME`` writes it; the proxy reads it, and writes it again after
each refresh (an authorization server may rotate the refresh token, OAuth 2.1 §4.3.1).
The file is read again when it changes, so a new ``login`` reaches a running proxy.
Nothing here logs a token.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.config_oauth import default_token_file
from proxy.core.errors import ProxyError

__all__ = ["StoredTokens", "TokenFile", "TokenFileError", "default_token_file"]

FILE_MODE = 0o600
DIR_MODE = 0o700


class TokenFileError(ProxyError):
    """The token file cannot be read or written (never quotes it: it holds secrets)."""


@dataclass(frozen=True)
class StoredTokens:
    """What one sign-in left: tokens, and how to refresh them."""

    access_token: str = dataclasses.field(repr=False)
    token_endpoint: str
    client_id: str
    resource: str | None = None
    expires_at: float | None = None  # seconds since the epoch; None: unknown
    refresh_token: str | None = dataclasses.field(default=None, repr=False)
    scope: str | None = None
    issuer: str | None = None
    # A client registered by `login` (RFC 7591) may have been given a secret.
    client_secret: str | None = dataclasses.field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: Any) -> StoredTokens:
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        fields = {f.name for f in dataclasses.fields(cls)}
        known = {k: v for k, v in data.items() if k in fields}
        for key in ("access_token", "token_endpoint", "client_id"):
            if not isinstance(known.get(key), str):
                raise ValueError(f"{key} missing")
        expires = known.get("expires_at")
        if expires is not None and not isinstance(expires, int | float):
            raise ValueError("expires_at is not a number")
        return cls(**known)


class TokenFile:
    """One server's token file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def stamp(self) -> tuple[int, int] | None:
        """What changes when the file is written again (None: no file)."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise TokenFileError(f"token file {self.path}: {exc.strerror}") from None
        return st.st_mtime_ns, st.st_ino

    def read(self) -> StoredTokens | None:
        """The tokens, or None when there is no file yet; ``TokenFileError`` when it is
        unreadable, malformed, or readable by others than its owner."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise TokenFileError(f"token file {self.path}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            if stat.S_IMODE(mode) & 0o077:
                raise TokenFileError(
                    f"token file {self.path}: readable by others (mode "
                    f"{stat.S_IMODE(mode):04o}): chmod 600 it, or sign in again"
                )
            raw = f.read()
        try:
            return StoredTokens.from_json(json.loads(raw))
        except (ValueError, TypeError) as exc:  # never quote the file
            why = exc.args[0] if isinstance(exc, ValueError) and exc.args else "malformed"
            raise TokenFileError(f"token file {self.path}: not a token file ({why})") from None

    def write(self, tokens: StoredTokens) -> None:
        """Replace the file with ``tokens`` (0600; the folder made 0700 if missing)."""
        folder = self.path.parent
        try:
            folder.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
            temp = folder / f".{self.path.name}.{os.getpid()}.tmp"
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
            with os.fdopen(fd, "w") as f:
                os.fchmod(f.fileno(), FILE_MODE)  # whatever the umask, or an old file's mode
                json.dump(tokens.to_json(), f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(temp, self.path)
        except OSError as exc:
            raise TokenFileError(f"token file {self.path}: {exc.strerror}") from None
