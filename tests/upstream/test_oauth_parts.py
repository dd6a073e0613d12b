"""The parts of the upstream OAuth client that need no server: the token file
(proxy/upstream/oauth_tokens.py), the discovery helpers (oauth_meta.py) and the
``oauth:`` config rules (proxy/config_oauth.py)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from proxy.config import ConfigError, config_from_mapping, load_config
from proxy.upstream.oauth_meta import (
    as_metadata_urls,
    bearer_challenge,
    canonical_resource,
    well_known,
)
from proxy.upstream.oauth_tokens import StoredTokens, TokenFile, TokenFileError, default_token_file

SECRET = "s3cr3t-access-token-value"


def tokens() -> StoredTokens:
    return StoredTokens(SECRET, "https://as.example/token", "client", refresh_token="r3fr3sh")


# ------------------------------------------------------------------ the token file
def test_the_token_file_is_0600_in_a_0700_folder_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        file = TokenFile(tmp_path / "state" / "oauth" / "x.json")
        file.write(tokens())
    finally:
        os.umask(old)
    assert stat.S_IMODE(file.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(file.path.parent.stat().st_mode) == 0o700
    assert file.read() == tokens()
    assert list(file.path.parent.iterdir()) == [file.path]  # no temporary file left


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    file = TokenFile(tmp_path / "x.json")
    file.write(tokens())
    os.chmod(file.path, 0o644)
    with pytest.raises(TokenFileError, match=r"readable by others .*chmod 600"):
        file.read()


def test_a_malformed_token_file_is_refused_without_quoting_it(tmp_path: Path) -> None:
    file = TokenFile(tmp_path / "x.json")
    file.path.write_text(json.dumps({"access_token": SECRET}))
    os.chmod(file.path, 0o600)
    with pytest.raises(TokenFileError) as caught:
        file.read()
    assert SECRET not in caught.value.message
    assert "token_endpoint missing" in caught.value.message
    file.path.write_text(SECRET)
    with pytest.raises(TokenFileError) as caught:
        file.read()
    assert SECRET not in caught.value.message


def test_no_token_file_yet_is_none(tmp_path: Path) -> None:
    assert TokenFile(tmp_path / "none.json").read() is None
    assert TokenFile(tmp_path / "none.json").stamp() is None


def test_tokens_are_not_in_their_repr() -> None:
    assert SECRET not in repr(tokens()) and "r3fr3sh" not in repr(tokens())


def test_the_default_token_file_is_under_xdg_state_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_token_file("remote") == tmp_path / "mcp-resume-proxy" / "oauth" / "remote.json"
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_token_file("remote").parts[-5:] == (
        ".local", "state", "mcp-resume-proxy", "oauth", "remote.json",
    )  # fmt: skip


# ------------------------------------------------------------------ discovery helpers
def test_bearer_challenge_parameters() -> None:
    header = (
        'Bearer error="insufficient_scope", scope="mcp:read mcp:tools", '
        'resource_metadata="https://s.example/.well-known/oauth-protected-resource/mcp"'
    )
    assert bearer_challenge(header) == {
        "error": "insufficient_scope",
        "scope": "mcp:read mcp:tools",
        "resource_metadata": "https://s.example/.well-known/oauth-protected-resource/mcp",
    }
    assert bearer_challenge('Basic realm="x"') == {}
    assert bearer_challenge(None) == {}
    assert bearer_challenge('Bearer realm="a \\"b\\"", error=invalid_token') == {
        "realm": 'a "b"',
        "error": "invalid_token",
    }


def test_well_known_urls_insert_the_path_then_the_root() -> None:
    assert well_known("https://s.example/public/mcp", "oauth-protected-resource") == [
        "https://s.example/.well-known/oauth-protected-resource/public/mcp",
        "https://s.example/.well-known/oauth-protected-resource",
    ]
    assert as_metadata_urls("https://as.example/tenant1") == [
        "https://as.example/.well-known/oauth-authorization-server/tenant1",
        "https://as.example/.well-known/openid-configuration/tenant1",
        "https://as.example/tenant1/.well-known/openid-configuration",
    ]
    assert as_metadata_urls("https://as.example") == [
        "https://as.example/.well-known/oauth-authorization-server",
        "https://as.example/.well-known/openid-configuration",
    ]


def test_canonical_resource() -> None:
    assert canonical_resource("HTTPS://MCP.Example.com/mcp#x") == "https://mcp.example.com/mcp"
    assert canonical_resource("https://mcp.example.com/") == "https://mcp.example.com"


# ------------------------------------------------------------------ config rules
def server(oauth: dict[str, object], url: str = "https://s.example/mcp") -> dict[str, object]:
    return {"servers": {"remote": {"url": url, "oauth": oauth}}}


@pytest.mark.parametrize(
    ("oauth", "url", "problem"),
    [
        ({"grant": "client_credentials"}, None, "needs client_id and client_secret"),
        ({"grant": "authorization_code"}, "wss://s.example/ws", "not websocket"),
        ({"grant": "authorization_code", "issuer": "as.example"}, None, "issuer: expected"),
        ({"grant": "authorization_code", "client_id": "c"}, None, "redirect_port: a configured"),
        ({"grant": "password"}, None, "grant: must be one of"),
    ],
)
def test_oauth_rules(oauth: dict[str, object], url: str | None, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem) as caught:
        config_from_mapping(server(oauth, url or "https://s.example/mcp"))
    assert "servers.remote.oauth" in str(caught.value)


def test_the_client_secret_is_read_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Like headers, it stays ``${NAME}`` in the config object: an unset variable fails the
    upstream's start, not the load, and no secret sits in the config."""
    monkeypatch.delenv("NO_SUCH_SECRET", raising=False)
    path = tmp_path / "p.yaml"
    path.write_text(
        "servers:\n  remote:\n    url: https://s.example/mcp\n    oauth:\n"
        "      {grant: client_credentials, client_id: c, client_secret: '${NO_SUCH_SECRET}'}\n"
    )
    oauth = load_config(path).servers["remote"].oauth
    assert oauth.client_secret == "${NO_SUCH_SECRET}"
    with pytest.raises(ConfigError, match="NO_SUCH_SECRET"):
        oauth.resolved_secret("servers.remote")
    monkeypatch.setenv("NO_SUCH_SECRET", SECRET)
    assert oauth.resolved_secret("servers.remote") == SECRET
