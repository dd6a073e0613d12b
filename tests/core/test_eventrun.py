"""proxy.core.eventrun: a run of logged events, framed in chunks of bounded size."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.eventid import format_event_id
from proxy.core.eventrun import EventRun, in_chunks
from proxy.core.sse import SSEDecoder, encode_comment, encode_event

payload = st.binary(min_size=0, max_size=300).map(lambda b: b.replace(b"\n", b" ").hex().encode())


def run_of(first: int, payloads: list[bytes]) -> EventRun:
    return EventRun("ep0ch.3.", first, payloads)


@settings(max_examples=200)
@given(
    first=st.integers(min_value=1, max_value=10**7),
    payloads=st.lists(payload, min_size=0, max_size=60),
)
def test_a_run_frames_as_encode_event_frames_each_event(first: int, payloads: list[bytes]) -> None:
    run = run_of(first, payloads)
    each = b"".join(
        encode_event(p, event_id=format_event_id("ep0ch", 3, first + i))
        for i, p in enumerate(payloads)
    )
    assert run.encode() == each
    assert run.size() == len(each)


@settings(max_examples=300)
@given(
    runs=st.lists(
        st.tuples(st.integers(min_value=1, max_value=99_990), st.lists(payload, max_size=40)),
        max_size=4,
    ),
    max_bytes=st.integers(min_value=1, max_value=4000),
)
def test_every_event_comes_once_and_in_order_across_chunk_edges(
    runs: list[tuple[int, list[bytes]]], max_bytes: int
) -> None:
    """Runs between single frames, cut into writes of about ``max_bytes``: decoded, the
    writes give every event once, in order, with its id; a write over the bound holds one
    event (an event is never split)."""
    items: list[bytes | EventRun] = []
    expected: list[tuple[str | None, str]] = []
    for n, (first, payloads) in enumerate(runs):
        items.append(encode_comment(f"before {n}"))
        single = encode_event(b'{"n":%d}' % n, event_id=f"ep0ch.9.{n + 1}")
        items.append(single)
        expected.append((f"ep0ch.9.{n + 1}", f'{{"n":{n}}}'))
        items.append(run_of(first, payloads))
        expected += [(f"ep0ch.3.{first + i}", p.decode()) for i, p in enumerate(payloads)]
    writes = list(in_chunks(items, max_bytes))
    assert all(writes), "no empty write"
    decoder = SSEDecoder()
    got = [(e.id, e.data) for w in writes for e in decoder.feed(w)]
    assert got == expected
    for w in writes:
        if len(w) > max_bytes:
            assert len(SSEDecoder().feed(w)) <= 1, "only a lone event goes over the bound"


def test_a_long_run_is_framed_lazily_chunk_by_chunk() -> None:
    """Nothing of a run is framed before its write is taken: the writer frames one chunk,
    writes it, and the event loop runs before the next."""
    run = run_of(1, [b"x" * 100] * 1000)
    framed: list[tuple[int, int | None]] = []
    real = EventRun.encode

    class Counting(EventRun):
        __slots__ = ()

        def encode(self, start: int = 0, stop: int | None = None) -> bytes:
            framed.append((start, stop))
            return real(self, start, stop)

    counting = Counting(run.id_prefix, run.first_seq, run.payloads)
    writes = in_chunks([counting], 10_000)
    first = next(writes)
    assert len(framed) == 1 and len(first) < run.size() // 5
    rest = list(writes)
    assert first + b"".join(rest) == run.encode()
    assert len(rest) + 1 == len(framed) > 10
