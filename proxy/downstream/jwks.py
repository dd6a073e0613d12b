"""The keys that sign bearer JWTs, fetched from a URL and kept fresh (parsing a JWK Set,
and which keys it keeps, is :mod:`proxy.jwks_keys`).

A URL's set is fetched at start, again every ``jwks_refresh_seconds`` (sooner, with a
backoff, while fetching fails), and when a token names a key id the set lacks, at most
once per :data:`KID_REFETCH_SECONDS` (an unknown ``kid`` costs an attacker nothing, so it
must not cost the issuer a request each). Fetching never stops the proxy: until a fetch
succeeds there are no keys and every JWT is refused. Messages and logs never hold key
material (a misplaced private key would be a secret).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterable

import aiohttp
import structlog

from proxy.backoff import Backoff
from proxy.jwks_keys import (  # the pure parsing; re-exported for the auth side
    ASYMMETRIC_ALGORITHMS,
    JwksError,
    KeySet,
    SigningKey,
    key_set_from,
    loggable_url,
    read_jwks_file,
)

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "FETCH_TIMEOUT_SECONDS",
    "KID_REFETCH_SECONDS",
    "MAX_JWKS_BYTES",
    "JwksError",
    "JwksUrl",
    "KeySet",
    "SigningKey",
    "key_set_from",
    "loggable_url",
    "read_jwks_file",
]

log = structlog.get_logger("proxy.auth")

KID_REFETCH_SECONDS = 30.0
MAX_JWKS_BYTES = 1024 * 1024
FETCH_TIMEOUT_SECONDS = 10.0


class JwksUrl:
    """The key set at a URL, kept fresh: :meth:`start` fetches it and starts the refresh
    task, :meth:`close` cancels it. :attr:`keys` is empty until a fetch succeeds."""

    def __init__(
        self,
        url: str,
        algorithms: Iterable[str],
        refresh_seconds: float,
        *,
        kid_refetch_seconds: float = KID_REFETCH_SECONDS,
        timeout_seconds: float = FETCH_TIMEOUT_SECONDS,
    ) -> None:
        self.url = url
        self.algorithms = frozenset(algorithms)
        self.refresh_seconds = refresh_seconds
        self.kid_refetch_seconds = kid_refetch_seconds
        self.timeout_seconds = timeout_seconds
        self.keys = KeySet()
        self.fetches = 0  # attempts, successful or not
        self._http: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._kid_refetched_at: float | None = None

    async def start(self) -> None:
        self._http = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=self.timeout_seconds)
        )
        ok = await self.refresh()
        self._task = asyncio.create_task(self._keep_fresh(ok), name="jwks-refresh")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def refresh(self) -> bool:
        """Fetch the set once; on success it replaces :attr:`keys` (else they stay)."""
        async with self._lock:
            return await self._fetch()

    async def key_for_unknown(self, kid: str | None) -> SigningKey | None:
        """The key ``kid`` names after a refetch, if none was made for an unknown key id
        in the last :attr:`kid_refetch_seconds` (else None at once)."""
        now = asyncio.get_running_loop().time()
        last = self._kid_refetched_at
        if last is not None and now - last < self.kid_refetch_seconds:
            if self._lock.locked():  # a refetch is under way: its answer counts
                async with self._lock:
                    pass
            return self.keys.find(kid)
        self._kid_refetched_at = now
        async with self._lock:
            if self.keys.find(kid) is None:  # not brought by a fetch we waited for
                log.info("jwks_refetch", why="unknown_kid", url=loggable_url(self.url))
                await self._fetch()
        return self.keys.find(kid)

    async def _keep_fresh(self, ok: bool) -> None:
        backoff = Backoff(first=1.0, cap=min(30.0, self.refresh_seconds))
        while True:
            if ok:
                backoff.reset()
                await asyncio.sleep(self.refresh_seconds)
            else:
                await asyncio.sleep(backoff.next_delay())
            ok = await self.refresh()

    async def _fetch(self) -> bool:
        try:
            return await self._fetch_once()
        except Exception:  # a bug here must not end the refresh task, nor the proxy
            log.exception("jwks_fetch_failed", url=loggable_url(self.url), keys=len(self.keys))
            return False

    async def _fetch_once(self) -> bool:
        if self._http is None:
            return False
        self.fetches += 1
        where = loggable_url(self.url)
        try:
            async with self._http.get(self.url, headers={"Accept": "application/json"}) as resp:
                if resp.status != 200:
                    raise JwksError(f"HTTP {resp.status}")
                body = bytearray()
                async for chunk in resp.content.iter_any():
                    body += chunk
                    if len(body) > MAX_JWKS_BYTES:
                        raise JwksError(f"over {MAX_JWKS_BYTES} bytes")
            try:
                document = json.loads(body)
            except ValueError:
                raise JwksError("not JSON") from None
            keys, problems = key_set_from(document, self.algorithms)
        except (aiohttp.ClientError, TimeoutError, JwksError) as exc:
            error = str(exc) or type(exc).__name__
            log.warning("jwks_fetch_failed", url=where, error=error, keys=len(self.keys))
            return False
        for problem in problems:
            log.warning("jwks_key_skipped", url=where, problem=problem)
        if not keys:
            log.warning("jwks_fetch_failed", url=where, error="no usable key", keys=len(self.keys))
            return False
        self.keys = keys
        log.info("jwks_loaded", url=where, keys=len(keys), kids=keys.kids())
        return True
