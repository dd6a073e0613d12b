"""The nemesis's checker: pure rules over every client's history and the store's audit
(issue 19, "A nemesis test"). Each rule yields :class:`Violation`; an empty list is a
pass. Unit-tested with good and bad histories (tests/nemesis/test_checker.py), so the
checker itself can fail.

Rules, per call:

- ``once_in_order``: the progress a client was given, over every resume, is 1, 2, ... k:
  nothing twice, nothing out of order, no gap;
- ``complete``: a call answered with its result was given every step first (``slow``);
- ``one_answer``: a client is told at most one end of a call;
- ``ended``: every call ends, with its result (the expected one) or a documented error;
- ``bounded``: within ``bound`` seconds of its start;
- ``audit``: the stream replayed from the store agrees with what the client was told:
  one answer at most, progress 1..m with no gap, what the client got is a prefix of it,
  and the client's answer is the store's (no second answer, none withheld).

Per run: ``leftover_key`` (a key with no TTL after the run) and ``leftover_process``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tests.nemesis.history import Audit, Call

# The documented ends of a call a client can act on (docs/errors.md, issue 19).
DOCUMENTED: frozenset[str] = frozenset(
    {
        "owner_lost",
        "owner_unreachable",
        "proxy_restarted",
        "proxy_shutdown",
        "proxy_draining",
        "history_truncated",
        "store_unavailable",
        "session_not_found",
        "session_expired",
        "upstream_start_failed",
        "upstream_closed",
        "upstream_restarted",
        "outcome_unknown",
        "connection_lost",  # the shim gave up reconnecting (docs/clients.md)
        "proxy_unreachable",  # the shim could not reach the proxy in time (docs/clients.md)
        "lost_before_id",  # a cut before the first event id: the client cannot know
    }
)


@dataclass(frozen=True)
class Violation:
    rule: str
    label: str
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: {self.label}: {self.detail}"


def contiguous(progress: list[int]) -> bool:
    return progress == list(range(1, len(progress) + 1))


def check_call(
    call: Call, bound: float, documented: frozenset[str] = DOCUMENTED
) -> list[Violation]:
    found: list[Violation] = []

    def bad(rule: str, detail: str) -> None:
        found.append(Violation(rule, call.label, detail))

    if not contiguous(call.progress):
        bad("once_in_order", f"progress given {call.progress}")
    if len(call.answers) > 1:
        bad("one_answer", f"told {call.answers}")
    if not call.answers:
        started = f"started t={call.started:.1f}s"
        steps = folded(call.notes)[-12:]
        bad("ended", f"{call.tool} never ended ({started}); its steps: {steps}")
    else:
        kind, value = call.answers[0]
        if kind == "result" and value != call.expect:
            bad("ended", f"result {value!r}, expected {call.expect!r}")
        if kind == "result" and call.tool == "slow" and call.expect.startswith("done "):
            steps = int(call.expect.split()[1])
            if call.progress and len(call.progress) != steps:
                bad("complete", f"result after {len(call.progress)} of {steps} steps")
        if kind == "error" and value not in documented:
            bad("ended", f"undocumented error {value!r}")
    if call.ended is not None and call.ended - call.started > bound:
        bad("bounded", f"ended after {call.ended - call.started:.1f}s > {bound:g}s")
    return found


def check_audit(call: Call, audit: Audit) -> list[Violation]:
    """The store's replay of ``call``'s stream against what its client was told."""
    if audit.gone is not None:
        return []  # nothing left to compare (counted by the report, not a violation)
    found: list[Violation] = []

    def bad(detail: str) -> None:
        found.append(Violation("audit", call.label, detail))

    if len(audit.answers) > 1:
        bad(f"the store holds {len(audit.answers)} answers: {audit.answers}")
    if not contiguous(audit.progress):
        bad(f"the store's progress has a gap or repeat: {audit.progress}")
    if audit.progress[: len(call.progress)] != call.progress:
        bad(f"client given {call.progress}, the store holds {audit.progress}")
    if call.answers and audit.answers and call.answers[0] != audit.answers[0]:
        bad(f"client told {call.answers[0]}, the store answered {audit.answers[0]}")
    if call.answers and call.answers[0][0] == "result" and not audit.answers:
        bad("client got a result the store never recorded")
    if (
        call.answers
        and call.answers[0][1] not in ("lost_before_id", "session_not_found")
        and call.answers[0] in audit.answers
        and audit.progress != call.progress
    ):
        missed = audit.progress[len(call.progress) :]
        bad(f"the store holds progress the client never got: {missed}")
    return found


def check_run(
    calls: Iterable[Call],
    audits: Mapping[str, Audit],
    *,
    bound: float,
    keys_without_ttl: Iterable[str] = (),
    leftover_processes: Iterable[str] = (),
    documented: frozenset[str] = DOCUMENTED,
) -> list[Violation]:
    """Every rule over a whole run."""
    found: list[Violation] = []
    for call in calls:
        found += check_call(call, bound, documented)
        if call.label in audits:
            found += check_audit(call, audits[call.label])
    found += [Violation("leftover_key", key, "no TTL after the run") for key in keys_without_ttl]
    found += [Violation("leftover_process", p, "still running") for p in leftover_processes]
    return found


def folded(notes: list[str]) -> list[str]:
    """``notes`` with each run of retries of one kind (``http503 t=…``) as one step."""
    out: list[str] = []
    run: list[str] = []
    for note in [*notes, ""]:
        kind = note.split(" ", 1)[0]
        if run and kind != run[0].split(" ", 1)[0]:
            out.append(run[0] if len(run) == 1 else f"{run[0]} .. {run[-1]} ({len(run)}x)")
            run = []
        if note:
            run.append(note)
    return out
