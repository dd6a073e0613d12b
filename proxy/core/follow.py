"""Watching one call for the client request that waits on it: what to do next, pure.

A modern request's HTTP response follows its :class:`~proxy.core.call.Call` until one of
these happens, and :meth:`Follower.decide` says which, given the time (``now``, monotonic
seconds) and the connection's state:

- the call ended → :class:`Answer`; but when the server answered -32042 (URL elicitation
  required) and the client can do URL elicitation → :class:`AskUrl`
  (:mod:`proxy.core.url_elicit`);
- the server asked the client something → gather the questions asked together (none came
  for ``GATHER_QUIET_SECONDS``, or ``GATHER_MAX_SECONDS`` since the first), then
  :class:`AskClient` (an ``input_required`` result, MRTR); a request that cannot carry input
  (a list) → :class:`RefuseInput` (the server hears the client cannot answer);
- it is due to become a task (``tasks.mode``, :func:`task_due`) → :class:`BecomeTask`;
- the client closed the response → :class:`ClientGone` (the call is cancelled upstream);
- nothing was written for ``keepalive`` seconds → :class:`Keepalive`;
- else → :class:`Wait` at most that long for the call to change.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.core.call import ASKING, Call, CallStatus
from proxy.core.sse import LIVENESS_SECONDS
from proxy.core.url_elicit import url_round

GATHER_QUIET_SECONDS = 0.03
GATHER_MAX_SECONDS = 0.25


@dataclass(frozen=True, slots=True)
class Answer:
    """The call ended: answer the request with its outcome."""


@dataclass(frozen=True, slots=True)
class RefuseInput:
    """The server asked during a request that cannot carry input: refuse its questions."""


@dataclass(frozen=True, slots=True)
class AskClient:
    """Answer the request with ``input_required`` and park the call for the retry."""


@dataclass(frozen=True, slots=True)
class AskUrl:
    """The server wants URL elicitations first (-32042): answer ``input_required`` and
    park ``call`` (unsent, waiting on them) for the retry, which sends it again."""

    call: Call


@dataclass(frozen=True, slots=True)
class BecomeTask:
    """Make the call a task and answer with its ``CreateTaskResult``."""


@dataclass(frozen=True, slots=True)
class ClientGone:
    """The client closed the response: cancel the call upstream."""


@dataclass(frozen=True, slots=True)
class Keepalive:
    """Write a keepalive comment (the response becomes an SSE stream)."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Wait at most ``seconds`` for the call to change, then decide again."""

    seconds: float


Step = Answer | RefuseInput | AskClient | AskUrl | BecomeTask | ClientGone | Keepalive | Wait


def task_due(
    call: Call,
    started: float,
    *,
    tasks_enabled: bool,
    mode: str,
    after_ms: int,
    tasks_full: bool,
) -> float | None:
    """When ``call`` becomes a task (``started`` + the mode's delay), or None if never:
    only ``tools/call`` of a client that declared the Tasks extension, not for a tool
    whose ``execution.taskSupport`` is ``forbidden``, not past ``tasks.max_running``."""
    if not (tasks_enabled and call.client.tasks and call.method == "tools/call"):
        return None
    if call.task_support == "forbidden" or tasks_full or mode == "never":
        return None
    if mode == "always":
        return started
    return started + after_ms / 1000


class Follower:
    """The decisions of one request's response about the call it waits on."""

    def __init__(self, method: str, task_at: float | None) -> None:
        self.with_input = method in ASKING  # MRTR: these requests may carry inputResponses
        self.task_at = task_at
        self._gathering: tuple[float, int, float] | None = None  # first, count, last change

    @property
    def gathering(self) -> bool:
        return self._gathering is not None

    def no_task(self) -> None:
        """The task could not be created (its record was not written): stay a plain call."""
        self.task_at = None

    def decide(self, call: Call, now: float, *, gone: bool, keepalive_in: float) -> Step:
        if call.done:
            again = url_round(call)
            return Answer() if again is None else AskUrl(again)
        if call.status is CallStatus.INPUT_REQUIRED and call.pending:
            if not self.with_input:
                return RefuseInput()
            return self._gather(len(call.pending), now)
        self._gathering = None
        if self.task_at is not None and now >= self.task_at:
            return BecomeTask()
        if gone:
            return ClientGone()
        if keepalive_in <= 0:
            return Keepalive()
        wait = min(LIVENESS_SECONDS, keepalive_in)
        if self.task_at is not None:
            wait = min(wait, self.task_at - now)
        return Wait(max(0.0, wait))

    def _gather(self, count: int, now: float) -> Step:
        """The server may ask several things at once: one ``input_required`` carries all
        that came until none came for the quiet time (at most the max after the first)."""
        if self._gathering is None:
            self._gathering = (now, count, now)
        first, seen, last = self._gathering
        if count != seen:
            self._gathering = (first, count, now)
            last = now
        due = min(last + GATHER_QUIET_SECONDS, first + GATHER_MAX_SECONDS)
        if now >= due:
            self._gathering = None
            return AskClient()
        return Wait(due - now)


def needs_tasks(task_support: str | None, *, tasks_enabled: bool, client_tasks: bool) -> bool:
    """A tool whose ``execution.taskSupport`` is ``required`` runs only as a task: a client
    without the Tasks extension (or a proxy with tasks off) is refused it (-32021)."""
    return task_support == "required" and not (tasks_enabled and client_tasks)
