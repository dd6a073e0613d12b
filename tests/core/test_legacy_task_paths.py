"""Which 2025-11-25 task requests a replica that does not hold the session serves itself,
and whose a legacy task is (proxy/core/legacy_tasks.py)."""

from __future__ import annotations

from proxy.core.legacy_tasks import REMOTE_METHODS, task_principal


def test_a_task_is_its_sessions_and_its_principals() -> None:
    assert task_principal("s1", None) == "session:s1"
    named = {task_principal("s1", "alice"), task_principal("s1", "bob"), task_principal("s2", None)}
    assert len(named) == 3 and "session:s1" not in named  # no principal reads another's


def test_reads_and_cancel_are_served_anywhere_creation_and_lists_by_the_holder() -> None:
    assert {"tasks/get", "tasks/result", "tasks/cancel"} == REMOTE_METHODS
    assert "tasks/list" not in REMOTE_METHODS and "tools/call" not in REMOTE_METHODS
