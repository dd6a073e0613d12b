"""proxy/core/errors.py: one error tree, drawn whole, and the one place error answers are
built (the builders' exact output; no error dict built by hand anywhere else)."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import proxy
from proxy.core import errors, jsonrpc, protocol
from proxy.core.era import ModernError
from proxy.core.errors import (
    LostReason,
    ProxyError,
    error_message,
    error_object,
    lost_answer,
    lost_error,
)

ROOT = Path(__file__).resolve().parents[2]

# The modules that may build error objects and envelopes themselves.
BUILDERS = ("proxy/core/errors.py",)


def _all_subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


def _import_every_module() -> None:
    for info in pkgutil.walk_packages(proxy.__path__, "proxy."):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue  # runs the command line when imported
        importlib.import_module(info.name)


def test_the_docstring_draws_every_proxy_error_class() -> None:
    _import_every_module()
    classes = sorted({cls.__name__ for cls in _all_subclasses(ProxyError)})
    assert len(classes) >= 24  # 21 in errors.py, ModernError, OwnerUnreachable, ...
    doc = errors.__doc__ or ""
    missing = [name for name in classes if f" {name} " not in doc]
    assert missing == [], f"core/errors.py's tree does not draw {missing}"


def test_the_docstring_names_every_lost_reason() -> None:
    doc = errors.__doc__ or ""
    assert [r.value for r in LostReason if f" {r.value} " not in doc] == []


def _hand_built(path: Path) -> Iterator[str]:
    """Dict displays that are a JSON-RPC error object (a ``"code"`` key) or an error
    envelope (``"jsonrpc"`` with ``"error"``)."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
        if "code" in keys:
            yield f"{path.relative_to(ROOT)}:{node.lineno}: an error object built by hand"
        elif {"jsonrpc", "error"} <= keys:
            yield f"{path.relative_to(ROOT)}:{node.lineno}: an error envelope built by hand"


def test_no_error_is_built_by_hand_outside_the_builders() -> None:
    found: list[str] = []
    for path in sorted((ROOT / "proxy").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in BUILDERS:
            continue
        found += _hand_built(path)
    assert found == []


def test_the_scan_sees_a_hand_built_error(tmp_path: Path) -> None:
    """The scan itself: it finds both shapes (so an empty answer above means something)."""
    sample = ROOT / "proxy" / "core" / "errors.py"
    assert len(list(_hand_built(sample))) == 2  # error_object's and error_message's


def test_jsonrpc_error_response_is_the_one_builder() -> None:
    assert jsonrpc.error_response is error_message


def test_error_object() -> None:
    assert error_object(-32601, "Method not found: x") == {
        "code": -32601,
        "message": "Method not found: x",
    }
    assert error_object(protocol.SERVER_ERROR, "gone", {"reason": "r", "limit": 3}) == {
        "code": -32000,
        "message": "gone",
        "data": {"reason": "r", "limit": 3},
    }
    # data that is falsy but given is written: only None means "no data"
    assert error_object(-32602, "bad", {}) == {"code": -32602, "message": "bad", "data": {}}


def test_error_message() -> None:
    assert error_message(7, -32603, "oops") == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32603, "message": "oops"},
    }
    assert error_message(None, -32700, "Parse error", {"reason": "parse_error"}) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error", "data": {"reason": "parse_error"}},
    }


def test_lost_error_and_lost_answer() -> None:
    assert lost_error(LostReason.OWNER_LOST, "replica lost") == {
        "code": -32000,
        "message": "replica lost",
        "data": {"reason": "owner_lost"},
    }
    assert lost_answer("a", LostReason.PROXY_SHUTDOWN, "the proxy is shutting down") == {
        "jsonrpc": "2.0",
        "id": "a",
        "error": {
            "code": -32000,
            "message": "the proxy is shutting down",
            "data": {"reason": "proxy_shutdown"},
        },
    }


def test_lost_reasons_are_the_closed_set_on_the_wire() -> None:
    assert {r.value for r in LostReason} == {
        "proxy_shutdown",
        "upstream_closed",
        "upstream_restarted",
        "owner_lost",
        "proxy_restarted",
        "task_cancelled",
        "upstream_message_too_large",
    }
    with pytest.raises(ValueError):
        LostReason("something_else")


def test_the_codes_are_named_once() -> None:
    assert (
        protocol.PARSE_ERROR,
        protocol.INVALID_REQUEST,
        protocol.METHOD_NOT_FOUND,
        protocol.INVALID_PARAMS,
        protocol.INTERNAL_ERROR,
        protocol.REQUEST_CANCELLED,
        protocol.SERVER_ERROR,
        protocol.SESSION_NOT_FOUND,
        protocol.HEADER_MISMATCH,
        protocol.MISSING_CAPABILITY,
        protocol.UNSUPPORTED_VERSION,
    ) == (-32700, -32600, -32601, -32602, -32603, -32800, -32000, -32001, -32020, -32021, -32022)
    from proxy.core import era

    assert (era.HEADER_MISMATCH, era.METHOD_NOT_FOUND, era.INVALID_PARAMS) == (
        -32020,
        -32601,
        -32602,
    )


def test_proxy_error_carries_data() -> None:
    plain = errors.UpstreamStartFailed("cannot start")
    assert plain.to_jsonrpc(3) == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {
            "code": -32603,
            "message": "cannot start",
            "data": {"reason": "upstream_start_failed"},
        },
    }
    given = ProxyError("with data", data={"reason": "x", "more": 1}, request_id=9)
    assert given.to_jsonrpc()["error"] == {
        "code": -32603,
        "message": "with data",
        "data": {"reason": "x", "more": 1},
    }
    assert given.to_jsonrpc()["id"] == 9


def test_modern_error_uses_the_base_conversion() -> None:
    assert "to_jsonrpc" not in vars(ModernError)
    error = ModernError(-32022, "Unsupported protocol version: x", data={"supported": ["y"]})
    assert error.http_status == 400
    assert error.to_jsonrpc(1) == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {
            "code": -32022,
            "message": "Unsupported protocol version: x",
            "data": {"supported": ["y"]},
        },
    }
    bare = ModernError(-32601, "Method not found: m", http_status=404)
    assert bare.to_jsonrpc(2)["error"] == {"code": -32601, "message": "Method not found: m"}
