from __future__ import annotations

import pytest

from proxy.core import httprules as r
from proxy.core.errors import (
    BadRequest,
    ForbiddenOrigin,
    MisdirectedHost,
    NotAcceptable,
    UnsupportedMediaType,
)

LOCAL = r.LOCAL_HOSTNAMES


@pytest.mark.parametrize(
    "accept", ["application/json, text/event-stream", "*/*", "application/json;q=1, text/*"]
)
def test_post_accept_ok(accept: str) -> None:
    r.check_post_accept(accept)


@pytest.mark.parametrize("accept", [None, "", "application/json", "text/event-stream", "text/html"])
def test_post_accept_refused(accept: str | None) -> None:
    with pytest.raises(NotAcceptable) as info:
        r.check_post_accept(accept)
    assert info.value.http_status == 406


def test_get_accept_and_content_type() -> None:
    r.check_get_accept("text/event-stream")
    with pytest.raises(NotAcceptable):
        r.check_get_accept("application/json")
    r.check_content_type("application/json; charset=utf-8")
    r.check_content_type(None)
    with pytest.raises(UnsupportedMediaType):
        r.check_content_type("text/plain")


def test_protocol_version_header() -> None:
    assert r.check_protocol_version(None) == "2025-03-26"
    assert r.check_protocol_version("2025-11-25") == "2025-11-25"
    for bad in ("2099-01-01", "banana", "2026-07-28"):
        with pytest.raises(BadRequest):
            r.check_protocol_version(bad)


@pytest.mark.parametrize("host", ["localhost:8808", "127.0.0.1", "[::1]:80", "LOCALHOST"])
def test_local_hosts_ok(host: str) -> None:
    r.check_host(host, LOCAL)


@pytest.mark.parametrize("host", [None, "evil.example", "evil.example:8808", "127.0.0.2"])
def test_other_hosts_421(host: str | None) -> None:
    with pytest.raises(MisdirectedHost) as info:
        r.check_host(host, LOCAL)
    assert info.value.http_status == 421


def test_origins() -> None:
    r.check_origin(None, LOCAL)
    r.check_origin("http://localhost:3000", LOCAL)
    r.check_origin("https://app.example", [*LOCAL, "https://app.example"])
    r.check_origin("https://anything", ["*"])
    for bad in ("http://evil.example", "null", "http://localhost.evil.example"):
        with pytest.raises(ForbiddenOrigin) as info:
            r.check_origin(bad, LOCAL)
        assert info.value.http_status == 403
