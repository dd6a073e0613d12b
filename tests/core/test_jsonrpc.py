"""JSON-RPC classification and parse errors."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core import jsonrpc
from proxy.core.errors import InvalidMessage, ParseError, ProxyError
from proxy.core.jsonrpc import Kind


@pytest.mark.parametrize(
    ("obj", "kind"),
    [
        ({"jsonrpc": "2.0", "id": 1, "method": "ping"}, Kind.REQUEST),
        ({"jsonrpc": "2.0", "id": "a", "method": "x", "params": {}}, Kind.REQUEST),
        ({"jsonrpc": "2.0", "method": "notifications/initialized"}, Kind.NOTIFICATION),
        ({"jsonrpc": "2.0", "id": 1, "result": {}}, Kind.RESPONSE),
        ({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "x"}}, Kind.RESPONSE),
    ],
)
def test_classify(obj: dict[str, object], kind: Kind) -> None:
    assert jsonrpc.classify(obj).kind is kind


@pytest.mark.parametrize(
    "obj",
    [
        [],
        "x",
        {"id": 1, "method": "ping"},
        {"jsonrpc": "1.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": 5},
        {"jsonrpc": "2.0", "id": 1.5, "method": "ping"},
        {"jsonrpc": "2.0", "id": True, "method": "ping"},
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": 3},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "id": 1, "result": {}, "error": {"code": 1}},
        {"jsonrpc": "2.0", "id": 1, "error": "bad"},
        {"jsonrpc": "2.0", "id": None, "result": {}},
    ],
)
def test_not_jsonrpc_is_invalid_request(obj: object) -> None:
    with pytest.raises(InvalidMessage) as info:
        jsonrpc.classify(obj)
    assert info.value.jsonrpc_code == -32600 and info.value.http_status == 400


def test_bad_json_is_parse_error() -> None:
    with pytest.raises(ParseError) as info:
        jsonrpc.parse_body(b"{nope")
    assert info.value.to_jsonrpc()["error"]["code"] == -32700
    with pytest.raises(InvalidMessage):
        jsonrpc.parse_body(b"[]")


def test_batch_and_line() -> None:
    msgs, batch = jsonrpc.parse_body(
        b'[{"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","id":1,"method":"b"}]'
    )
    assert batch and [m.kind for m in msgs] == [Kind.NOTIFICATION, Kind.REQUEST]
    assert jsonrpc.parse_line(b'{"jsonrpc":"2.0","id":1,"result":{}}\n').kind is Kind.RESPONSE
    assert b"\n" not in jsonrpc.encode({"x": "a\nb"})


@given(st.binary(max_size=200))
def test_garbage_bytes_parse_or_raise_documented(data: bytes) -> None:
    try:
        jsonrpc.parse_body(data)
    except ProxyError as exc:
        assert exc.jsonrpc_code in (-32700, -32600)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=6), c, max_size=4),
        max_leaves=10,
    )
)
def test_any_json_value_classifies_or_raises_invalid(value: object) -> None:
    with contextlib.suppress(InvalidMessage):
        jsonrpc.classify(value)


def test_a_lone_message_keeps_its_own_bytes_unless_they_hold_a_line_break() -> None:
    line = b'{"jsonrpc": "2.0", "method": "x"}\n'
    assert jsonrpc.parse_line(line).encoded() == line.strip()
    odd = b'{"jsonrpc":"2.0",\r"method":"x"}'
    assert jsonrpc.parse_line(odd).encoded() == b'{"jsonrpc":"2.0","method":"x"}'
    (msg,), _ = jsonrpc.parse_body(b' {"jsonrpc":"2.0","id":1,"result":{}} ')
    assert msg.encoded() == b'{"jsonrpc":"2.0","id":1,"result":{}}'


@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF)))
def test_encode_gives_back_what_decode_read_even_lone_surrogates(text: str) -> None:
    obj = {"jsonrpc": "2.0", "method": "m", "params": {"text": text}}
    line = jsonrpc.encode(obj)
    assert b"\n" not in line and jsonrpc.decode(line) == obj
    # A lone surrogate arrives from a peer as an escape that is valid JSON.
    upstream = jsonrpc.decode(b'{"jsonrpc":"2.0","id":1,"result":{"t":"a\\ud800b"}}')
    assert jsonrpc.decode(jsonrpc.encode(upstream)) == upstream
