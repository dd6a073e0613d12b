"""Deadlines of a session (proxy/core/schedule.py): the heap, and that it changes nothing.

The session keeps each stream's earliest deadline in a heap and recomputes only the
streams an event wrote to. These tests hold it to the straightforward algorithm it
replaced (scan every stream after every event, and on every tick): the same commands,
step by step, for random interleavings of calls, answers, drops, resumes, polls, ticks
and the passing of time; and that an event no longer costs a look at every stream.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.errors import ProxyError
from proxy.core.events import (
    ClientDelete,
    ClientDetached,
    CloseClient,
    Command,
    ConnId,
    LogNote,
    SendToClient,
    SendUpstream,
    UpstreamClosed,
    WakeAt,
)
from proxy.core.schedule import DeadlineHeap, Schedule
from proxy.core.session import Session
from proxy.core.session_state import STANDALONE, SessionSettings, StreamSlot
from proxy.core.stream import StreamState
from tests.core.playbook import Playbook, note, ok, progress, req, upstream_sent

# ---------------------------------------------------------------- the heap on its own


def test_heap_earliest_follows_changes_and_removals() -> None:
    heap = DeadlineHeap()
    assert heap.earliest() is None
    heap.set(1, 10.0)
    heap.set(2, 5.0)
    assert heap.earliest() == 5.0
    heap.set(2, 20.0)  # moved later: the old entry is stale, not the minimum
    assert heap.earliest() == 10.0
    heap.set(1, None)
    assert heap.earliest() == 20.0 and len(heap) == 1
    heap.set(2, None)
    assert heap.earliest() is None and len(heap) == 0


def test_heap_pop_due_unschedules_each_stream_once() -> None:
    heap = DeadlineHeap()
    heap.set(3, 1.0)
    heap.set(3, 2.0)
    heap.set(3, 1.0)  # back to an earlier value: two entries say (1.0, 3)
    heap.set(4, 1.5)
    heap.set(5, 9.0)
    assert sorted(heap.pop_due(2.0)) == [3, 4]
    assert heap.pop_due(2.0) == []
    assert heap.earliest() == 9.0 and len(heap) == 1


@given(st.lists(st.tuples(st.integers(0, 20), st.none() | st.floats(0, 100)), max_size=400))
def test_heap_agrees_with_a_plain_dict(ops: list[tuple[int, float | None]]) -> None:
    heap, model = DeadlineHeap(), {}
    for number, at in ops:
        heap.set(number, at)
        if at is None:
            model.pop(number, None)
        else:
            model[number] = at
        assert heap.earliest() == (min(model.values()) if model else None)
        assert len(heap._heap) <= 2 * len(model) + 65  # stale entries are compacted away


# ---------------------------------------------------------------- the algorithm it replaced


class ScanningSchedule(Schedule):
    """The schedule as it was: every stream looked at after each event and on each tick."""

    def __init__(self, session: Session) -> None:
        super().__init__(session.settings, session._streams, session._now)
        self._session = session

    def due(self, now: float) -> Iterator[int]:
        yield from list(self._session._streams)

    def next_wake(self, now: float, *, busy: bool, closed: bool) -> float | None:
        self._session._streams.dirty.clear()  # the scan needs no marks: only the flag counts
        return super().next_wake(now, busy=busy, closed=closed)

    def next_deadline(self, now: float, *, closed: bool) -> float | None:
        return scanned_deadline(self._session)


class ScanningSession(Session):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.schedule = ScanningSchedule(self)
        self.delivery._schedule = self.schedule


def scanned_deadline(session: Session) -> float | None:
    deadlines: list[float] = []
    for stream in session._streams.values():
        if stream.conn is not None and stream.close_at is not None:
            deadlines.append(stream.close_at)
        if stream.create_at is not None and stream.state is StreamState.LIVE:
            deadlines.append(stream.create_at)
        for at in (session.schedule.abandon_at(stream), session.schedule.expire_at(stream)):
            if at is not None:
                deadlines.append(at)
    if session.closed and not deadlines:
        deadlines.append(session._now)
    idle_since = session.schedule.idle_since
    if idle_since is not None and not session.closed:
        deadlines.append(idle_since + session.settings.idle_timeout)
    return min(deadlines) if deadlines else None


class ScanningPlaybook(Playbook):
    def __post_init__(self) -> None:
        self.session = ScanningSession("sid", "ep0ch", self.settings, self.now)


# ---------------------------------------------------------------- a random client and server


class Driver:
    """One playbook and what its client knows: open connections, ids, announced streams."""

    def __init__(self, pb: Playbook) -> None:
        self.pb = pb
        self.in_flight: list[int] = []  # upstream ids of calls not yet answered
        self.calls: dict[int, int] = {}  # upstream id -> the client's id
        self.conns: list[ConnId] = []
        self.last_ids: list[str] = []  # the last event id seen on each stream
        self.refs: list[dict[str, Any]] = []  # streamId + resumeToken of announced streams
        self.rid = 100

    def step(self, action: Callable[[], list[Command]]) -> list[Command] | str:
        try:
            out = action()
        except ProxyError as exc:
            return f"{type(exc).__name__}: {exc.message}"
        latest: dict[str, str] = {}
        for cmd in out:
            if isinstance(cmd, SendToClient):
                stream = cmd.event_id.split(".")[1]
                latest[stream] = ".".join(cmd.event_id.split(".")[:3])
                if cmd.payload is not None:
                    msg = json.loads(cmd.payload)
                    if msg.get("method") == "notifications/stream/create":
                        params = msg["params"].get("stream", msg["params"])
                        self.refs.append({k: params[k] for k in ("streamId", "resumeToken")})
            elif isinstance(cmd, CloseClient) and cmd.conn in self.conns:
                self.conns.remove(cmd.conn)
            elif isinstance(cmd, SendUpstream):
                msg = json.loads(cmd.payload)
                if msg.get("method") == "tools/call":
                    self.in_flight.append(msg["id"])
                    self.calls[msg["id"]] = self.rid
        self.last_ids.extend(latest.values())
        return out

    def call(self) -> list[Command] | str:
        self.rid += 1
        conn = self.pb.conn()
        self.conns.append(conn)
        params = {"name": "slow", "_meta": {"progressToken": f"t{self.rid}"}}
        return self.step(lambda: self.pb.post(conn, req(self.rid, "tools/call", params)))

    def answer(self, pick: int, with_result: bool) -> list[Command] | str:
        if not self.in_flight:
            return "nothing in flight"
        upstream_id = self.in_flight[pick % len(self.in_flight)]
        if not with_result:
            token = f"t{self.calls[upstream_id]}"
            return self.step(lambda: self.pb.upstream(progress(token, 1)))
        self.in_flight.remove(upstream_id)
        return self.step(lambda: self.pb.upstream(ok(upstream_id)))

    def chatter(self) -> list[Command] | str:
        return self.step(lambda: self.pb.upstream(note("notifications/message", {"x": 1})))

    def drop(self, pick: int) -> list[Command] | str:
        if not self.conns:
            return "no connection"
        conn = self.conns.pop(pick % len(self.conns))
        return self.step(lambda: self.pb.feed(ClientDetached(conn)))

    def resume(self, pick: int) -> list[Command] | str:
        last = self.last_ids[pick % len(self.last_ids)] if self.last_ids else None
        conn = self.pb.conn()
        self.conns.append(conn)
        return self.step(lambda: self.pb.get(conn, last))

    def seed_request(self, pick: int, method: str) -> list[Command] | str:
        if not self.refs:
            return "nothing announced"
        ref = self.refs[pick % len(self.refs)]
        self.rid += 1
        conn = self.pb.conn()
        self.conns.append(conn)
        return self.step(lambda: self.pb.post(conn, req(f"res-{self.rid}", method, ref)))

    def cancel(self, pick: int) -> list[Command] | str:
        if not self.in_flight:
            return "nothing in flight"
        upstream_id = self.in_flight.pop(pick % len(self.in_flight))
        cancel = note("notifications/cancelled", {"requestId": self.calls[upstream_id]})
        return self.step(lambda: self.pb.post(self.pb.conn(), cancel))

    def tick(self, dt: float, to_wake: bool) -> list[Command] | str:
        wake = self.pb.session.schedule.wake
        if to_wake and wake is not None and wake >= self.pb.now:
            dt = wake - self.pb.now  # exactly on a deadline
        return self.step(lambda: self.pb.tick(dt))


_CALL = st.tuples(st.just("call"))
_ANSWER = st.tuples(st.just("answer"), st.integers(0, 9), st.booleans())
_TICK = st.tuples(
    st.just("tick"), st.sampled_from([0.0, 0.5, 1.0, 1.5, 3.0, 10.0, 200.0]), st.booleans()
)
_RESUME = st.tuples(st.just("resume"), st.integers(0, 99))
_SEED = st.tuples(
    st.just("seed"), st.integers(0, 9), st.sampled_from(["stream/poll", "stream/resume"])
)
_DROP = st.tuples(st.just("drop"), st.integers(0, 9))
# Weighted by repetition: mostly calls, answers, drops, resumes and time passing.
ACTIONS = st.one_of(
    *[_CALL, _ANSWER, _TICK] * 3,
    *[_DROP, _RESUME, _SEED] * 2,
    st.tuples(st.just("chatter")),
    st.tuples(st.just("cancel"), st.integers(0, 9)),
)
ENDINGS = st.sampled_from([(), ("closed",), ("delete",)])

SETTINGS = st.builds(
    SessionSettings,
    completed_retention=st.sampled_from([0.0, 1.0, 5.0]),
    idle_timeout=st.sampled_from([3.0, 50.0]),
    max_stream_seconds=st.sampled_from([None, 2.0]),
    create_after=st.sampled_from([0.0, 1.5]),
    resume_interval_max=st.sampled_from([4.0, 100.0]),
    detach_after_create=st.booleans(),
    max_streams=st.sampled_from([3, 1000]),
    overflow=st.sampled_from(["block", "truncate"]),
    stream_max_events=st.sampled_from([3, 100]),
    token_secret=st.just(b"k" * 32),
)


def play(driver: Driver, action: tuple[Any, ...]) -> list[Command] | str:
    name, *args = action
    if driver.pb.session.forgotten:
        return "forgotten"
    if name == "call":
        return driver.call()
    if name == "answer":
        return driver.answer(*args)
    if name == "chatter":
        return driver.chatter()
    if name == "drop":
        return driver.drop(*args)
    if name == "resume":
        return driver.resume(*args)
    if name == "seed":
        return driver.seed_request(*args)
    if name == "cancel":
        return driver.cancel(*args)
    if name == "tick":
        return driver.tick(*args)
    if name == "closed":
        return driver.step(lambda: driver.pb.feed(UpstreamClosed("test")))
    return driver.step(lambda: driver.pb.feed(ClientDelete()))


@settings(max_examples=300, deadline=None)
@given(
    SETTINGS,
    st.booleans(),
    st.lists(ACTIONS, min_size=5, max_size=80),
    ENDINGS,
    st.lists(st.one_of(_TICK, _RESUME, _SEED, _DROP), max_size=10),
)
def test_same_commands_as_scanning_every_stream(
    config: SessionSettings,
    seeded: bool,
    actions: list[tuple[Any, ...]],
    ending: tuple[Any, ...],
    after: list[tuple[Any, ...]],
) -> None:
    heap, scan = Driver(Playbook(settings=config)), Driver(ScanningPlaybook(settings=config))
    for driver in (heap, scan):
        driver.pb.initialize({"streams": {}} if seeded else None)
    assert heap.pb.log == scan.pb.log
    for i, action in enumerate([*actions, *([ending] if ending else []), *after]):
        got, want = play(heap, action), play(scan, action)
        assert got == want, f"step {i} {action}"
        session = heap.pb.session
        if not session.forgotten:
            # What the runtime's timer is set to is what a scan of every stream gives.
            assert session.schedule.wake == scanned_deadline(session), f"step {i} {action}"


def test_wake_ups_that_come_due_mid_tick_run_in_the_same_tick() -> None:
    """A stream that one tick's work makes due (zero retention) goes in that tick when
    its number is higher, exactly as a pass over every stream in order would."""
    config = SessionSettings(completed_retention=0.0, resume_interval_max=5.0)
    drivers = [Driver(Playbook(settings=config)), Driver(ScanningPlaybook(settings=config))]
    for d in drivers:
        d.pb.initialize({"streams": {}})
        d.call()  # stream 2, announced
        d.drop(0)
        d.seed_request(0, "stream/resume")  # stream 3 waits on stream 2
        d.drop(0)
    outs = [d.tick(5.0, False) for d in drivers]
    assert outs[0] == outs[1]
    assert any(isinstance(c, LogNote) and c.event == "stream_abandoned" for c in outs[0])


def test_a_poll_alone_moves_the_abandonment_of_the_stream_it_names() -> None:
    """stream/poll resets the abandonment timer (DESIGN §6) of a stream nothing else
    touches: its deadline must move although only ``touched`` was written."""
    config = SessionSettings(resume_interval_max=4.0, token_secret=b"k" * 32)
    drivers = [Driver(Playbook(settings=config)), Driver(ScanningPlaybook(settings=config))]
    outs: list[list[Any]] = [[], []]
    for d, out in zip(drivers, outs, strict=True):
        d.pb.initialize({"streams": {}})
        d.call()
        d.drop(0)  # stream 2 detached at t0: abandoned at t0 + 4
        d.tick(3.0, False)
        out.append(d.seed_request(0, "stream/poll"))  # at t0 + 3: now abandoned at t0 + 7
        out.append(d.tick(1.5, False))  # t0 + 4.5: past the old deadline, nothing due
        out.append(d.tick(2.5, False))  # t0 + 7: abandoned
    assert outs[0] == outs[1]
    poll, early, due = outs[0]
    assert WakeAt(drivers[0].pb.now) in poll
    assert not any(isinstance(c, LogNote) and c.event == "stream_abandoned" for c in early)
    assert any(isinstance(c, LogNote) and c.event == "stream_abandoned" for c in due)


# ---------------------------------------------------------------- the cost of an event


class CountingSchedule(Schedule):
    looked_at = 0

    def deadline_of(self, stream: StreamSlot) -> float | None:
        CountingSchedule.looked_at += 1
        return super().deadline_of(stream)


class CountingSession(Session):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.schedule = CountingSchedule(self.settings, self._streams, self._now)
        self.delivery._schedule = self.schedule


def test_a_call_looks_at_its_own_stream_not_at_every_retained_one() -> None:
    pb = Playbook(settings=SessionSettings(max_streams=5000))
    pb.session = CountingSession("sid", "ep0ch", pb.settings, pb.now)
    pb.initialize()
    for i in range(2000):  # 2,000 completed streams, retained for 120 s
        out = pb.post(pb.conn(), req(i + 10, "tools/call", {"name": "echo"}))
        pb.upstream(ok(upstream_sent(out)[0]["id"]))
    assert len(pb.session.stream_numbers()) == 2002
    CountingSchedule.looked_at = 0
    conn = pb.conn()
    out = pb.post(conn, req("last", "tools/call", {"name": "echo"}))
    pb.upstream(ok(upstream_sent(out)[0]["id"]))
    pb.feed(ClientDetached(conn))
    assert CountingSchedule.looked_at <= 6  # a scan would look at 2,002 streams 3 times
    wakes = [c for c in pb.log if isinstance(c, WakeAt)]
    assert wakes  # the first retained stream's expiry is armed, and stays the earliest
    pb.log.clear()
    out = pb.tick(121.0)  # every retained stream expires at once, in one tick
    assert pb.session.stream_numbers() == [STANDALONE]
    assert pb.session.schedule.deadlines.earliest() is None
    assert isinstance(out[-1], WakeAt)  # only the idle timeout is left
    idle_since = pb.session.schedule.idle_since
    assert idle_since is not None and out[-1].at == idle_since + pb.settings.idle_timeout


def test_every_deadline_input_write_marks_its_stream() -> None:
    pb = Playbook()
    pb.initialize()
    stream = pb.session._streams[STANDALONE]
    pb.session._streams.dirty.clear()
    for name, value in [
        ("conn", ConnId(7)),
        ("state", StreamState.COMPLETED),
        ("close_at", 1.0),
        ("done_at", 2.0),
        ("create_at", 3.0),
        ("touched", 4.0),
    ]:
        setattr(stream, name, value)
        assert getattr(stream, name) == value
        assert pb.session._streams.dirty == {STANDALONE}, name
        pb.session._streams.dirty.clear()
    stream.cursor = 5  # not a deadline input
    assert not pb.session._streams.dirty
    # A heap entry for a stream that is gone never wakes anyone.
    pb.session.schedule.deadlines.set(99, 0.0)
    pb.session._streams.dirty.add(99)
    pb.session.schedule.reschedule()
    assert 99 not in pb.session.schedule.deadlines
