from __future__ import annotations

from proxy.core.idmap import IdMap, progress_token_of


def test_client_ids_of_any_type_map_to_fresh_upstream_ids() -> None:
    ids = IdMap()
    a = ids.add_client_request(1, "tools/call", stream=3, token="t")
    b = ids.add_client_request("1", "ping", stream=4, token=None)
    assert (a, b) == (1, 2) and len(ids) == 2
    assert ids.upstream_id_of(1) == a and ids.upstream_id_of("1") == b
    assert ids.upstream_id_of(True) is None
    assert ids.stream_of_progress("t") == 3 and ids.only_stream_in_flight() is None
    assert ids.finish(a).client_id == 1
    assert ids.stream_of_progress("t") is None and ids.only_stream_in_flight() == 4
    assert ids.pending(True) is None and ids.pending(b) is not None


def test_server_requests_round_trip_once() -> None:
    ids = IdMap()
    d = ids.add_server_request("srv-1")
    assert ids.take_server_request(d) == (True, "srv-1")
    assert ids.take_server_request(d) == (False, None)
    d2 = ids.add_server_request(7)
    assert ids.cancel_server_request("7") is None
    assert ids.cancel_server_request(7) == d2
    assert ids.take_server_request(d2) == (False, None)


def test_progress_token_must_be_string_or_integer() -> None:
    assert progress_token_of({"_meta": {"progressToken": "x"}}) == "x"
    assert progress_token_of({"_meta": {"progressToken": 5}}) == 5
    for bad in (
        {"_meta": {"progressToken": True}},
        {"_meta": {"progressToken": 1.5}},
        {"_meta": 3},
        {},
    ):
        assert progress_token_of(bad) is None
