"""Which era a client that speaks both is served, and what that means for resumption.

A dual-era client (fastmcp 4, the Python SDK and the TypeScript SDK 2.x in ``auto`` mode)
opens with ``server/discover`` and adopts 2026-07-28 when the answer offers it; on
``-32022`` (UnsupportedProtocolVersion) whose ``data.supported`` lists handshake-era
revisions only, it falls back to ``initialize`` (2026-07-28 ``basic/versioning.mdx``,
dual-era clients; the SDKs' ``negotiate_auto``). 2026-07-28 removed resumption
(SEP-2575: a broken response stream loses the request; durable work is the Tasks
extension), while 2025-11-25 resumes a stream with ``GET`` + ``Last-Event-ID``.

``dual_era`` (per server, ``modern.dual_era`` by default, docs/modern.md):

- ``modern``: ``server/discover`` is answered; a dual-era client is served 2026-07-28 and
  has no resumption unless it uses the Tasks extension;
- ``legacy``: a ``server/discover`` that does not declare the Tasks extension is refused
  with that ``-32022``, so a dual-era client is served 2025-11-25 and resumes. One that
  declares Tasks (while ``tasks.enabled``) is answered: its calls can be tasks. A modern
  request sent without a discover (a client pinned to 2026-07-28) is served as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from proxy.core.era import META_CAPABILITIES, TASKS_EXTENSION

DUAL_ERA_CHOICES: Final = ("modern", "legacy")
DISCOVER: Final = "server/discover"


def declares_tasks(raw: Mapping[str, Any]) -> bool:
    """Whether a modern request's ``_meta`` client capabilities declare the Tasks extension."""
    params = raw.get("params")
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    caps = meta.get(META_CAPABILITIES) if isinstance(meta, Mapping) else None
    extensions = caps.get("extensions") if isinstance(caps, Mapping) else None
    return isinstance(extensions, Mapping) and TASKS_EXTENSION in extensions


def discover_refused(raw: Mapping[str, Any], dual_era: str, tasks_enabled: bool) -> bool:
    """Whether this modern request is a ``server/discover`` to refuse with ``-32022`` (legacy
    revisions only) so that its dual-era client falls back to ``initialize``."""
    if raw.get("method") != DISCOVER or dual_era != "legacy":
        return False
    return not (tasks_enabled and declares_tasks(raw))


def eras_served(modern_enabled: bool, dual_era: str, tasks_enabled: bool) -> dict[str, str]:
    """What a server's clients are served, for the startup log and ``/status``:
    ``dual_era`` (the era a dual-era client gets: ``legacy``, ``modern``) and ``resumption``
    (one sentence on what that means)."""
    legacy = "2025-11-25 clients resume a broken stream with Last-Event-ID"
    if not modern_enabled:
        return {
            "dual_era": "legacy",
            "resumption": f"modern.enabled is false: every client is served 2025-11-25; {legacy}",
        }
    tasks = "the Tasks extension" if tasks_enabled else "nothing (tasks.enabled is false)"
    if dual_era == "legacy":
        exception = " (2026-07-28 if it declares the Tasks extension)" if tasks_enabled else ""
        return {
            "dual_era": "legacy",
            "resumption": (
                f"a client that speaks both eras is served 2025-11-25{exception}; {legacy}; "
                f"a 2026-07-28-only client loses a call on a broken stream unless it uses {tasks}"
            ),
        }
    return {
        "dual_era": "modern",
        "resumption": (
            "a client that speaks both eras (fastmcp, SDKs in auto mode) is served 2026-07-28 "
            f"and loses a call on a broken stream unless it uses {tasks}; {legacy}; "
            "dual_era: legacy serves dual-era clients 2025-11-25"
        ),
    }
