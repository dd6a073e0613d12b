"""proxy/core/jsoncodec.py: msgspec and the standard library read and write the same."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core import jsoncodec, jsonrpc
from proxy.core.errors import ParseError


@pytest.fixture(params=["msgspec", "stdlib"])
def codec(request: pytest.FixtureRequest) -> Iterator[str]:
    assert jsoncodec.available()  # the test extra installs it: both ways are tested
    was = jsoncodec.fast()
    jsoncodec.use_fast(request.param == "msgspec")
    try:
        yield request.param
    finally:
        jsoncodec.use_fast(was)


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**100), max_value=2**100)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20,
)


@given(value=JSON_VALUES)
def test_both_read_what_json_reads_to_the_same_values(value: Any) -> None:
    for text in (json.dumps(value).encode(), json.dumps(value, ensure_ascii=False).encode()):
        for fast in (True, False):
            jsoncodec.use_fast(fast)
            try:
                assert jsoncodec.loads(text) == json.loads(text)
                assert json.loads(jsoncodec.dumps(value)) == value
            finally:
                jsoncodec.use_fast(True)


@pytest.mark.parametrize(
    "text",
    [
        b'{"id":123456789012345678901234567890}',  # beyond 64 bits: an int, not a float
        b'{"id":-9223372036854775809}',
        b'{"a":NaN,"b":Infinity,"c":-Infinity,"d":1e400}',
        b'{"t":"a\\ud800b"}',  # a lone surrogate
        '{"a":"\u00e9"}'.encode("utf-16"),  # json.loads detects UTF-16
        b'\xef\xbb\xbf{"a":1}',  # a UTF-8 byte order mark
        b'{"a":1,"a":2}',
    ],
)
def test_the_edges_read_and_write_as_the_standard_library_does(codec: str, text: bytes) -> None:
    value = jsoncodec.loads(text)
    expected = json.loads(text)
    assert json.dumps(value) == json.dumps(expected)  # NaN == NaN as text
    written = jsoncodec.dumps(value)
    assert b"\n" not in written
    assert json.dumps(json.loads(written)) == json.dumps(expected)


def test_nan_and_infinity_are_written_back_as_read(codec: str) -> None:
    value = jsoncodec.loads(b'{"a":NaN,"b":-Infinity,"c":1e400,"d":1.5}')
    assert jsoncodec.dumps(value) == b'{"a":NaN,"b":-Infinity,"c":Infinity,"d":1.5}'
    assert math.isnan(value["a"]) and value["d"] == 1.5


@pytest.mark.parametrize("text", [b"", b"{", b'{"a":1}{', b"[1,]", b"\xff", b"nul"])
def test_what_is_not_json_is_refused_with_the_standard_librarys_words(
    codec: str, text: bytes
) -> None:
    with pytest.raises(ValueError) as stdlib:
        json.loads(text)
    with pytest.raises(ParseError) as ours:
        jsonrpc.decode(text)
    assert ours.value.message == f"Parse error: {stdlib.value}"


def test_a_rewritten_id_keeps_a_big_integer_in_the_result(codec: str) -> None:
    line = b'{"jsonrpc":"2.0","id":7,"result":{"n":123456789012345678901234567890}}'
    msg = jsonrpc.parse_line(line)
    assert jsonrpc.encode(jsonrpc.with_id(msg, "c-1")) == (
        b'{"jsonrpc":"2.0","id":"c-1","result":{"n":123456789012345678901234567890}}'
    )


def test_a_message_keeps_its_wire_form(codec: str) -> None:
    line = b' {"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1}} '
    assert jsonrpc.parse_line(line).encoded() == line.strip()
    assert jsonrpc.parse_line(b'{"jsonrpc":"2.0",\r"method":"m"}').wire is None
