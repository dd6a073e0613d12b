"""The nemesis's checker and schedule, pure: good histories pass, each kind of bad one
fails with its rule (so the checker itself can fail), and a seed gives one schedule."""

from __future__ import annotations

import pytest

from tests.nemesis.checker import Violation, check_audit, check_call, check_run
from tests.nemesis.history import Audit, Call
from tests.nemesis.schedule import KINDS, make_schedule, parse_kinds

BOUND = 30.0


def slow(progress: list[int], *answers: tuple[str, str], took: float = 1.0) -> Call:
    call = Call("legacy-0", "legacy", "legacy-0#1", "slow", "done 5", started=10.0)
    call.progress = progress
    for kind, value in answers:
        call.answer(kind, value, 10.0 + took)
    return call


def rules(found: list[Violation]) -> list[str]:
    return sorted(v.rule for v in found)


def test_a_call_answered_after_every_step_passes() -> None:
    assert check_call(slow([1, 2, 3, 4, 5], ("result", "done 5")), BOUND) == []


def test_a_documented_error_after_some_steps_passes() -> None:
    assert check_call(slow([1, 2], ("error", "owner_lost")), BOUND) == []


@pytest.mark.parametrize(
    ("progress", "answers", "rule"),
    [
        ([1, 2, 2, 3, 4, 5], [("result", "done 5")], "once_in_order"),  # given twice
        ([1, 3, 4, 5], [("result", "done 5")], "once_in_order"),  # a gap
        ([2, 1], [("error", "owner_lost")], "once_in_order"),  # out of order
        ([1, 2], [("error", "owner_lost"), ("result", "done 5")], "one_answer"),
        ([1, 2, 3], [], "ended"),  # a hang
        ([1], [("error", "http500")], "ended"),  # undocumented
        ([1, 2, 3, 4, 5], [("result", "done 4")], "ended"),  # a wrong result
        ([1, 2, 3], [("result", "done 5")], "complete"),  # answered before every step
    ],
)
def test_each_bad_history_fails_its_rule(
    progress: list[int], answers: list[tuple[str, str]], rule: str
) -> None:
    assert rule in rules(check_call(slow(progress, *answers), BOUND))


def test_a_call_that_ends_past_the_bound_fails() -> None:
    assert rules(check_call(slow([1], ("error", "owner_lost"), took=BOUND + 1), BOUND)) == [
        "bounded"
    ]


def test_the_audit_agrees_with_what_the_client_was_told() -> None:
    told = slow([1, 2, 3, 4, 5], ("result", "done 5"))
    assert check_audit(told, Audit([1, 2, 3, 4, 5], [("result", "done 5")])) == []
    cut = slow([1, 2], ("error", "owner_lost"))
    assert check_audit(cut, Audit([1, 2], [("error", "owner_lost")])) == []
    assert check_audit(cut, Audit(gone="410 history_truncated")) == []


@pytest.mark.parametrize(
    ("audit", "detail"),
    [
        # issue 19 #8: the paused owner wrote on after owner_lost: 7 missing, 2 answers
        (Audit([1, 2, 4, 5], [("error", "owner_lost"), ("result", "done 5")]), "2 answers"),
        (Audit([1, 2, 4], [("error", "owner_lost")]), "gap"),
        (Audit([1], [("error", "owner_lost")]), "client given"),
        (Audit([1, 2], [("result", "done 5")]), "client told"),  # answered differently
        (Audit([1, 2, 3], [("error", "owner_lost")]), "never got"),  # withheld progress
    ],
)
def test_a_store_that_disagrees_fails_the_audit(audit: Audit, detail: str) -> None:
    found = check_audit(slow([1, 2], ("error", "owner_lost")), audit)
    assert found and all(v.rule == "audit" for v in found)
    assert any(detail in v.detail for v in found), found


def test_a_result_the_store_never_recorded_fails_the_audit() -> None:
    found = check_audit(slow([1, 2, 3, 4, 5], ("result", "done 5")), Audit([1, 2, 3, 4, 5]))
    assert rules(found) == ["audit"]


def test_leftovers_fail_the_run() -> None:
    call = slow([1, 2, 3, 4, 5], ("result", "done 5"))
    assert check_run([call], {}, bound=BOUND) == []
    found = check_run(
        [call], {}, bound=BOUND, keys_without_ttl=["mrp:{n}:x"], leftover_processes=["42 proxy"]
    )
    assert rules(found) == ["leftover_key", "leftover_process"]


def test_a_seed_gives_one_schedule_with_every_kind_asked() -> None:
    one = make_schedule(7, seconds=60, count=10)
    assert one == make_schedule(7, seconds=60, count=10)
    assert one != make_schedule(8, seconds=60, count=10)
    assert {f.kind for f in one} == set(KINDS)
    assert [f.at for f in one] == sorted(f.at for f in one) and one[-1].at < 60
    only = make_schedule(7, seconds=60, count=4, kinds=parse_kinds("cut,pause"))
    assert {f.kind for f in only} == {"cut", "pause"}
    with pytest.raises(ValueError, match="unknown fault kinds"):
        parse_kinds("cut,flood")
