"""An idle session's upstream process is stopped, the session kept (``upstream_idle_stop``,
the config's ``upstream.stop_idle_seconds``): when it is due, what keeps a session from
idling, and that the next message for the upstream counts as activity again."""

from __future__ import annotations

from proxy.core.events import (
    ClientDetached,
    ForgetSession,
    LogNote,
    StopIdleUpstream,
    StopUpstream,
    WakeAt,
)
from proxy.core.session import SessionSettings
from tests.core.playbook import (
    Playbook,
    call,
    note,
    ok,
    payloads,
    req,
    slow,
    up,
    upstream_sent,
)

IDLE = SessionSettings(upstream_idle_stop=30, idle_timeout=600)


def test_an_idle_sessions_process_is_stopped_and_the_session_stays() -> None:
    pb = Playbook(settings=IDLE)
    pb.initialize()  # idle from 1000; the initialize's stream is retained until 1120
    assert pb.tick(29) == [WakeAt(1030.0)]
    assert pb.tick(1) == [StopIdleUpstream(30), WakeAt(1120.0)]
    assert pb.session.upstream_stopped and pb.session.snapshot().upstream_stopped
    assert not pb.session.closed and not pb.session.forgotten
    # Stopped once: nothing more is due for it; the session's own idle timeout still runs.
    assert pb.tick(90) == [WakeAt(1600.0)]
    assert pb.tick(570) == [StopUpstream("idle timeout"), ForgetSession("idle timeout")]


def test_the_next_request_goes_upstream_and_the_idle_clock_starts_again() -> None:
    pb = Playbook(settings=IDLE)
    pb.initialize()
    assert pb.tick(30)[0] == StopIdleUpstream(30)
    c, uid = call(pb, rid=9)  # forwarded as ever: the transport starts the process for it
    assert up(slow(uid)) in pb.log
    assert not pb.session.upstream_stopped
    pb.feed(ClientDetached(c))
    # In flight: never stopped, however long (only its abandonment is due, an hour on).
    assert pb.tick(100) == [WakeAt(4630.0)]
    pb.upstream(ok(uid))  # idle from 1130
    assert pb.tick(29) == [WakeAt(1160.0)]
    assert pb.tick(1)[0] == StopIdleUpstream(30)


def test_an_open_standalone_stream_keeps_the_process_running() -> None:
    pb = Playbook(settings=IDLE)
    pb.initialize()
    standalone = pb.conn()
    pb.get(standalone)
    assert StopIdleUpstream(30) not in pb.tick(300)
    assert not pb.session.upstream_stopped
    pb.feed(ClientDetached(standalone))  # idle from 1300
    assert pb.tick(29) == [WakeAt(1330.0)]
    assert pb.tick(1)[0] == StopIdleUpstream(30)


def test_a_notification_to_a_stopped_process_restarts_the_idle_clock() -> None:
    pb = Playbook(settings=IDLE)
    pb.initialize()
    assert pb.tick(30)[0] == StopIdleUpstream(30)
    pb.tick(10)
    out = pb.post(pb.conn(), note("notifications/roots/list_changed"))
    assert up(note("notifications/roots/list_changed")) in out
    assert not pb.session.upstream_stopped
    # Not stopped again at once for a clock that began before it: 30 s from now (1040).
    assert pb.tick(29) == [WakeAt(1070.0)]
    assert pb.tick(1)[0] == StopIdleUpstream(30)


def test_without_the_setting_the_process_runs_until_the_session_ends() -> None:
    pb = Playbook(settings=SessionSettings(idle_timeout=600))
    pb.initialize()
    assert pb.tick(599) == [WakeAt(1600.0)]
    assert not pb.session.upstream_stopped
    assert pb.tick(1) == [StopUpstream("idle timeout"), ForgetSession("idle timeout")]


def test_a_question_the_stopped_server_asked_is_void() -> None:
    """The server asked on the standalone stream; its process is stopped before the
    answer came: the late answer is not sent to the new process, which never asked."""
    pb = Playbook(settings=IDLE)
    pb.initialize()
    pb.upstream(req(50, "roots/list"))  # logged on the standalone stream
    standalone = pb.conn()
    (asked,) = payloads(pb.get(standalone), standalone)
    pb.feed(ClientDetached(standalone))  # idle from 1000 (the clock did not move)
    assert pb.tick(30)[0] == StopIdleUpstream(30)
    out = pb.post(pb.conn(), ok(asked["id"], {"roots": []}))
    assert LogNote("client_response_unmatched", {"response_id": asked["id"]}) in out
    assert upstream_sent(out) == []


def test_a_stop_time_past_the_idle_timeout_changes_nothing() -> None:
    pb = Playbook(settings=SessionSettings(upstream_idle_stop=600, idle_timeout=600))
    pb.initialize()
    assert pb.tick(600) == [StopUpstream("idle timeout"), ForgetSession("idle timeout")]
