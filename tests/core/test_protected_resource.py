"""The resource-server role's decisions (proxy/core/protected_resource.py), pure: which
resource a path is, its metadata, the audiences and scopes it needs, its challenges."""

from __future__ import annotations

import pytest

from proxy.core.protected_resource import (
    WELL_KNOWN,
    ProtectedServer,
    ResourceServer,
    audience_accepted,
    canonical,
    is_metadata,
)

BASE = "https://MCP.example:8443"


def two_servers() -> ResourceServer:
    return ResourceServer(
        authorization_servers=("https://idp.example",),
        servers={
            "a": ProtectedServer(("/servers/a/mcp", "/mcp"), ("/servers/a/ws", "/ws")),
            "b": ProtectedServer(
                ("/servers/b/mcp",),
                ("/servers/b/ws",),
                required_scopes=("tools", "read"),
                advertised_scopes=("admin",),
            ),
        },
        scopes_supported=("read",),
        required_scopes=("read",),
        audiences=("https://API.example/",),
        base=BASE,
    )


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("HTTPS://MCP.Example:8443/", "https://mcp.example:8443"),
        ("https://mcp.example/Servers/A/mcp/", "https://mcp.example/Servers/A/mcp"),
        ("https://mcp.example/mcp#frag", "https://mcp.example/mcp"),
        ("my-api", "my-api"),
        ("http://[::1", "http://[::1"),  # not a URI: kept
    ],
)
def test_canonical(uri: str, expected: str) -> None:
    assert canonical(uri) == expected


def test_audiences_per_path() -> None:
    rs = two_servers()
    base = "https://mcp.example:8443"
    at_a = rs.accepted_audiences("/servers/a/ws")
    assert at_a == {base, f"{base}/servers/a/mcp", f"{base}/mcp", "https://api.example"}
    assert audience_accepted(["x", f"{base}/MCP"], at_a) is False  # a path keeps its case
    assert audience_accepted(f"{base}/mcp/", at_a) is True
    assert f"{base}/servers/b/mcp" in rs.accepted_audiences("/readyz")  # any server's
    assert audience_accepted(None, at_a) is False


def test_metadata_documents() -> None:
    rs = two_servers()
    base = "https://mcp.example:8443"
    assert rs.metadata(WELL_KNOWN + "/servers/b/mcp") == {
        "resource": f"{base}/servers/b/mcp",
        "authorization_servers": ["https://idp.example"],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["read", "tools", "admin"],
    }
    assert rs.metadata(WELL_KNOWN + "/mcp")["resource"] == f"{base}/mcp"  # type: ignore[index]
    root = rs.metadata(WELL_KNOWN)
    assert root is not None and root["resource"] == base
    assert root["scopes_supported"] == ["read", "tools", "admin"]
    for none in ("/servers/a/ws", "/servers/c/mcp", "x", "/readyz"):
        assert rs.metadata(WELL_KNOWN + none) is None, none
    assert is_metadata(WELL_KNOWN) and is_metadata(WELL_KNOWN + "/mcp")
    assert not is_metadata(WELL_KNOWN + "-other")


def test_challenges() -> None:
    rs = two_servers()
    meta = "https://mcp.example:8443" + WELL_KNOWN
    assert rs.scopes_required("/servers/b/ws") == ("read", "tools")
    assert rs.challenge("/servers/b/ws", error="insufficient_scope", scope=("read", "tools")) == (
        'Bearer realm="mcp-resume-proxy", error="insufficient_scope", scope="read tools", '
        f'resource_metadata="{meta}/servers/b/mcp"'
    )
    assert rs.challenge("/ws") == (
        f'Bearer realm="mcp-resume-proxy", resource_metadata="{meta}/servers/a/mcp"'
    )
    assert rs.challenge("/mcp").endswith(f'resource_metadata="{meta}/mcp"')
    assert rs.challenge("/status").endswith(f'resource_metadata="{meta}"')
