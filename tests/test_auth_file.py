"""``auth.tokens_file`` end to end (with ``${NAME}`` interpolation), the rules of the
``auth:`` section (proxy/config_auth.py) called directly and through
``mcp-resume-proxy check`` and start (exit 2, the key path first, no secret quoted), and
the per-principal resume limit of the Authenticator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from proxy.config_auth import AuthConfig, check_auth, load_tokens
from proxy.config_rules import ConfigError, build, interpolated
from proxy.downstream.auth import Authenticator
from tests.downstream.sse_client import RawSession
from tests.jwt_issuer import Issuer
from tests.support import DEMO, ROOT, bearer, run_proxy_on

ALICE = "alice-token-0123456789abcdef"
DAVE = "dave-token-from-the-environment-0001"
ERIN = "erin-token-written-in-the-file-0002"
SECRET_IN_FILE = "this-token-must-never-be-quoted-0003"


async def test_tokens_from_a_file_with_interpolation(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.yaml"
    tokens_file.write_text(
        f'- {{token: "${{DAVE_TOKEN}}", principal: dave}}\n- {{token: {ERIN}, principal: erin}}\n'
    )
    config: dict[str, Any] = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "upstream": {"command": DEMO, "stop_grace_seconds": 3},
        "auth": {
            "tokens": [{"token": ALICE, "principal": "alice"}],
            "tokens_file": str(tokens_file),
        },
        "log": {"format": "json", "level": "debug"},
    }
    async with run_proxy_on(tmp_path, config, {"DAVE_TOKEN": DAVE}) as proxy:
        sessions = {}
        for token in (ALICE, DAVE, ERIN):
            async with aiohttp.ClientSession(headers=bearer(token)) as http:
                session = RawSession(http, proxy.url)
                await session.initialize()
                sessions[token] = session.headers()
        async with aiohttp.ClientSession() as http:
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
            for token, status in ((ERIN, 404), (DAVE, 200)):  # dave's session is dave's
                headers = {**sessions[DAVE], **bearer(token)}
                async with http.post(proxy.url, json=call, headers=headers) as resp:
                    assert resp.status == status, await resp.text()
                    await resp.read()
            for wrong in ("${DAVE_TOKEN}", DAVE + "x"):
                async with http.post(proxy.url, json=call, headers=bearer(wrong)) as resp:
                    assert resp.status == 401
        log_text = proxy.log_text()
    assert '"static_tokens": 3' in log_text  # auth_enabled counts them
    assert not any(token in log_text for token in (ALICE, DAVE, ERIN))


# -------------------------------------------------------------------- the rules
def _cases(tmp: Path) -> list[tuple[dict[str, Any], str]]:
    """(an ``auth:`` section, the start of its error); files it names are written here."""
    (tmp / "not-yaml.yaml").write_text(f"- {{token: {SECRET_IN_FILE}, principal: [\n")
    (tmp / "short.yaml").write_text("- {token: short, principal: p}\n")
    (tmp / "nobody.yaml").write_text(f"- {{token: {ERIN}, principal: erin}}\n- {{token: {DAVE}}}\n")
    (tmp / "twice.yaml").write_text(f"- {{token: {ALICE}, principal: again}}\n")
    (tmp / "unset.yaml").write_text("- {token: '${NOT_SET_ANYWHERE}', principal: p}\n")
    (tmp / "typo.yaml").write_text(f"- {{tokn: {ERIN}, principal: p}}\n")
    (tmp / "mapping.yaml").write_text(f"token: {ERIN}\nprincipal: p\n")
    (tmp / "not-json.json").write_text("{keys: ")
    issuer = Issuer()
    issuer.rsa("k1")
    private = issuer.jwks()
    private["keys"][0]["d"] = "AQAB"
    (tmp / "private.json").write_text(json.dumps(private))
    (tmp / "hmac.json").write_text('{"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}]}')
    (tmp / "empty.json").write_text('{"keys": []}')
    ok_jwks = issuer.write_jwks(tmp / "ok.json")
    alice = {"token": ALICE, "principal": "alice"}
    f = str(tmp)
    return [
        ({"tokens_file": f"{f}/missing.yaml"}, "auth.tokens_file: cannot read"),
        ({"tokens_file": f"{f}/not-yaml.yaml"}, "auth.tokens_file: "),
        ({"tokens_file": f"{f}/short.yaml"}, "auth.tokens_file[0].token: use at least 16"),
        ({"tokens_file": f"{f}/nobody.yaml"}, "auth.tokens_file[1].principal: name who"),
        (
            {"tokens": [alice], "tokens_file": f"{f}/twice.yaml"},
            "auth.tokens_file[0].token: a token is listed twice (also auth.tokens[0])",
        ),
        ({"tokens_file": f"{f}/unset.yaml"}, "auth.tokens_file[0].token: environment variable"),
        ({"tokens_file": f"{f}/typo.yaml"}, "auth.tokens_file[0].tokn: unknown key"),
        ({"tokens_file": f"{f}/mapping.yaml"}, "auth.tokens_file: expected a list"),
        ({"tokens": [{"token": "short", "principal": "p"}]}, "auth.tokens[0].token: use at"),
        ({"tokens": [{"token": ALICE}]}, "auth.tokens[0].principal: name who presents"),
        ({"tokens": [alice, alice]}, "auth.tokens[1].token: a token is listed twice"),
        (
            {"jwt": {"jwks_file": ok_jwks, "jwks_url": "https://idp.example/jwks"}},
            "auth.jwt: give jwks_file or jwks_url, not both",
        ),
        (
            {"jwt": {"jwks_file": ok_jwks, "algorithms": ["RS256", "HS256"]}},
            "auth.jwt.algorithms[1]: 'HS256' is not allowed",
        ),
        ({"jwt": {"jwks_file": ok_jwks, "algorithms": ["none"]}}, "auth.jwt.algorithms[0]: 'none'"),
        ({"jwt": {"jwks_file": ok_jwks, "algorithms": []}}, "auth.jwt.algorithms: name at least"),
        ({"jwt": {"jwks_file": ok_jwks, "principal_claim": ""}}, "auth.jwt.principal_claim: "),
        ({"jwt": {"jwks_url": "file:///etc/jwks"}}, "auth.jwt.jwks_url: expected an http(s)://"),
        ({"jwt": {"jwks_file": f"{f}/missing.json"}}, "auth.jwt.jwks_file: cannot read"),
        ({"jwt": {"jwks_file": f"{f}/not-json.json"}}, "auth.jwt.jwks_file: "),
        ({"jwt": {"jwks_file": f"{f}/private.json"}}, "auth.jwt.jwks_file: "),
        ({"jwt": {"jwks_file": f"{f}/hmac.json"}}, "auth.jwt.jwks_file: "),
        ({"jwt": {"jwks_file": f"{f}/empty.json"}}, "auth.jwt.jwks_file: "),
        ({"jwt": {"issuer": "https://idp.example"}}, "auth.jwt.issuer: set auth.jwt.jwks_file"),
        ({"per_principal": {"max_sessions": 2}}, "auth.per_principal: limits per principal"),
    ]


_DETAILS = {  # what the message says after the key path, for the files' cases
    "not-yaml.yaml": "is not valid YAML (line",
    "not-json.json": "is not JSON",
    "private.json": "holds private key material",
    "hmac.json": "a symmetric key",
    "empty.json": "holds no key",
}


def _expected(auth: dict[str, Any], start: str) -> list[str]:
    named = str(auth.get("tokens_file") or auth.get("jwt", {}).get("jwks_file") or "")
    return [start, *(d for name, d in _DETAILS.items() if named.endswith("/" + name))]


def test_each_rule_of_the_auth_section(tmp_path: Path) -> None:
    for auth, start in _cases(tmp_path):
        with pytest.raises(ConfigError) as info:
            check_auth(build("auth", AuthConfig, interpolated(auth, "auth")))
        message = str(info.value)
        assert message.startswith(start), (auth, message)
        assert all(part in message for part in _expected(auth, start)), (auth, message)
        assert SECRET_IN_FILE not in message


def test_a_valid_auth_section_passes(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.yaml"
    tokens_file.write_text(f"- {{token: {ERIN}, principal: erin}}\n")
    issuer = Issuer()
    issuer.ec("e1")
    auth = {
        "tokens": [{"token": ALICE, "principal": "alice"}],
        "tokens_file": str(tokens_file),
        "jwt": {"jwks_file": issuer.write_jwks(tmp_path / "jwks.json"), "algorithms": ["ES256"]},
        "per_principal": {"max_sessions": 2, "resumes_per_minute": 10},
    }
    settings = build("auth", AuthConfig, auth)
    check_auth(settings)
    assert load_tokens(settings) == [(ALICE, "alice"), (ERIN, "erin")]
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_tokens(build("auth", AuthConfig, {"tokens_file": str(empty)})) == []


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "proxy", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin"},
        timeout=60,
    )


def test_check_names_the_file_and_the_key_of_each_auth_error(tmp_path: Path) -> None:
    """Through ``mcp-resume-proxy check`` (proxy/config.py calls check_auth): one run
    over every case's file, one error line each."""
    cases = list(_cases(tmp_path))
    paths = []
    for i, (auth, _) in enumerate(cases):
        path = tmp_path / f"bad-{i}.yaml"
        path.write_text(yaml.safe_dump({"upstream": {"command": [sys.executable]}, "auth": auth}))
        paths.append(path)
    done = run_cli("check", *(str(path) for path in paths))
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == len(cases), done.stderr
    for path, line, (auth, start) in zip(paths, lines, cases, strict=True):
        assert line.startswith(f"{path}: {start}"), (auth, line)
        assert all(part in line for part in _expected(auth, start)), line
    assert SECRET_IN_FILE not in done.stderr


def test_the_proxy_refuses_to_start_on_a_bad_jwks_file(tmp_path: Path) -> None:
    (tmp_path / "hmac.json").write_text('{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}')
    path = tmp_path / "proxy.yaml"
    auth = {"jwt": {"jwks_file": str(tmp_path / "hmac.json")}}
    path.write_text(yaml.safe_dump({"upstream": {"command": DEMO}, "auth": auth}))
    done = run_cli("--config", str(path))
    assert done.returncode == 2, done.stderr
    assert "config error: auth.jwt.jwks_file: " in done.stderr
    assert "a symmetric key" in done.stderr


# -------------------------------------------------------------------- per principal
def test_resumes_are_limited_per_principal() -> None:
    tokens = [{"token": ALICE, "principal": "alice"}]
    limited = Authenticator(
        build("auth", AuthConfig, {"tokens": tokens, "per_principal": {"resumes_per_minute": 2}})
    )
    assert limited.resume_allowed("alice", 0.0) is None
    assert limited.resume_allowed("alice", 0.0) is None
    assert limited.resume_allowed("alice", 0.0) == pytest.approx(30.0)  # Retry-After
    assert limited.resume_allowed("bob", 0.0) is None  # a bucket of its own
    assert limited.resume_allowed(None, 0.0) is None  # no principal: nothing to limit
    assert limited.resume_allowed("alice", 30.0) is None
    unlimited = Authenticator(build("auth", AuthConfig, {"tokens": tokens}))
    assert all(unlimited.resume_allowed("alice", 0.0) is None for _ in range(1000))


def test_auth_is_on_as_soon_as_a_source_is_configured(tmp_path: Path) -> None:
    """Even a tokens file that turns out empty, or a JWKS URL not fetched yet, turns
    authentication on: every request is then refused, never let through."""
    for auth in (
        {},
        {"tokens_file": str(tmp_path / "tokens.yaml")},
        {"jwt": {"jwks_url": "http://127.0.0.1:9/jwks.json"}},
        {"jwt": {"jwks_file": str(tmp_path / "jwks.json")}},
    ):
        assert Authenticator(build("auth", AuthConfig, auth)).enabled is bool(auth)
