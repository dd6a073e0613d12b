"""No secret in the logs: scenarios through the proxy at ``log.level: debug`` with
``--log-format json`` (the config's ``log.format: json``), then every line is searched for
every secret the scenarios handled: the upstream's ``Authorization`` header value, the
token secret, a full session id, a resume token, an MRTR ``requestState``, a task id, and
the clients' credentials: static tokens (from the config and from ``auth.tokens_file``)
and JWTs, whole and their signature, accepted or refused for each reason."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp

from tests.downstream.sse_client import RawSession, messages
from tests.e2e.node_tools import run_server_everything
from tests.jwt_issuer import AUDIENCE, ISSUER, an_issuer, bad_tokens
from tests.modern.client import TASKS, Modern
from tests.support import (
    FIXTURE,
    MCP_HEADERS,
    bearer,
    eventually,
    initialize_request,
    log_events,
    run_proxy,
    run_proxy_on,
    tool_call,
)

HEADER_SECRET = "hdr-secret-4d1c8e0b9a7f"
TOKEN_SECRET = "token-secret-with-some-length-7e2"
STATIC_TOKEN = "static-token-9b3e51c07d2a"
FILE_TOKEN = "file-token-from-env-58c1f0a2e6"


async def test_no_secret_reaches_the_logs(tmp_path: Path) -> None:
    seen: dict[str, str] = {}
    issuer = an_issuer()
    good_jwt = issuer.token("r1", "carol")
    refused = {f"JWT refused ({what})": token for what, (token, _) in bad_tokens(issuer).items()}
    refused["a wrong static token"] = STATIC_TOKEN[:-1] + "x"
    tokens_file = tmp_path / "tokens.yaml"
    tokens_file.write_text('- {token: "${FILE_TOKEN}", principal: dave}\n')
    async with run_server_everything("streamableHttp", tmp_path) as everything:
        config: dict[str, Any] = {
            "listen": {"host": "127.0.0.1", "port": 0},
            "upstream": {
                "url": f"{everything.base}/mcp",
                "headers": {"Authorization": "Bearer ${UPSTREAM_TOKEN}"},
            },
            "streams": {"token_secret": TOKEN_SECRET},
            "tasks": {"mode": "always"},
            "auth": {
                "tokens": [{"token": STATIC_TOKEN, "principal": "alice"}],
                "tokens_file": str(tokens_file),
                "jwt": {
                    "jwks_file": issuer.write_jwks(tmp_path / "jwks.json", "r1", "e1"),
                    "issuer": ISSUER,
                    "audience": AUDIENCE,
                },
            },
            "log": {"format": "json", "level": "debug"},
        }
        env = {"UPSTREAM_TOKEN": HEADER_SECRET, "FILE_TOKEN": FILE_TOKEN}
        async with (
            run_proxy_on(tmp_path, config, env) as proxy,
            aiohttp.ClientSession(headers=bearer(STATIC_TOKEN)) as as_alice,
            aiohttp.ClientSession(headers=bearer(FILE_TOKEN)) as as_dave,
            aiohttp.ClientSession(headers=bearer(good_jwt)) as as_carol,
            aiohttp.ClientSession() as anonymous,
        ):
            # Refused: no credential, a wrong one, a JWT bad in each way.
            for token in [None, *refused.values()]:
                headers = {**MCP_HEADERS, **(bearer(token) if token else {})}
                async with anonymous.post(
                    proxy.url, json=initialize_request(), headers=headers
                ) as resp:
                    assert resp.status == 401
                    await resp.read()
            # Legacy, with the seed's streams (a static token): a resume token, then a
            # resume with it.
            legacy = RawSession(as_alice, proxy.url)
            await legacy.initialize_with({"streams": {}})
            seen["session id"] = legacy.session_id
            call = tool_call(2, "trigger-long-running-operation", {"duration": 0.2, "steps": 2})
            events = await legacy.request(2, "tools/call", call["params"])
            created = [m for m in messages(events) if m.get("method") == "notifications/stream"]
            stream = created[0]["params"]["stream"] if created else None
            if stream is not None:
                seen["resume token"] = stream["resumeToken"]
                await legacy.request(
                    3,
                    "stream/poll",
                    {"streamId": stream["streamId"], "resumeToken": stream["resumeToken"]},
                )
            # Modern (a token from the file): an MRTR requestState.
            modern = Modern(as_dave, proxy.url, caps={"sampling": {}})
            first = await modern.call("trigger-sampling-request", {"prompt": "p", "maxTokens": 5})
            seen["requestState"] = first.result["requestState"]
            # A task (a JWT). (The TypeScript SDK lists its tools taskSupport "forbidden"
            # unless they were registered as task tools: this one is "required".)
            task = await Modern(as_carol, proxy.url).call(
                "simulate-research-query", {"topic": "t"}, caps=TASKS
            )
            seen["task id"] = task.result["taskId"]
            await Modern(as_carol, proxy.url, caps=TASKS).task("tasks/get", task.result["taskId"])
            log_text = proxy.log_text()
    secrets = {
        "header": HEADER_SECRET,
        "token secret": TOKEN_SECRET,
        "static token": STATIC_TOKEN,
        "token from the file": FILE_TOKEN,
        "JWT": good_jwt,
        "JWT signature": good_jwt.rsplit(".", 1)[1],
        **seen,
        **refused,
        **{
            f"{what}, signature": token.rsplit(".", 1)[1]
            for what, token in refused.items()
            if token.count(".") == 2 and token.rsplit(".", 1)[1]
        },
    }
    lines = log_text.splitlines()
    assert lines and all(json.loads(line) for line in lines if line.startswith("{"))
    leaks = {what: value for what, value in secrets.items() if value in log_text}
    assert not leaks, f"secrets in the log: {sorted(leaks)}"
    assert len(seen) >= 3, seen  # the scenario did handle them
    whys = {entry.get("why") for entry in log_events(log_text, "request_refused")}
    assert {why for _, why in bad_tokens(an_issuer()).values()} <= whys  # each was refused


async def _raw_exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` as it is on a connection of its own; what comes back until close."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await reader.read()
    finally:
        writer.close()


async def test_a_request_aiohttp_cannot_parse_is_logged_and_answered_without_its_bytes(
    tmp_path: Path,
) -> None:
    """Headers past aiohttp's 8190-byte limit, a header line without its colon, a bad
    request line, more than 128 headers: each gets 400, and neither the log nor the answer
    quotes the request (aiohttp's own message quoted ~100 characters of the
    ``Authorization`` value: a JWT's header and claims)."""
    issuer = an_issuer()
    groups = [f"group-{i:05d}" for i in range(700)]  # a JWT past 8 KB: many claims
    big_jwt = issuer.token("r1", "carol", groups=groups)
    assert len(big_jwt) > 8190
    claims = big_jwt.split(".")[1]
    head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n"
    many = "".join(f"X-Header-{i}: {STATIC_TOKEN}\r\n" for i in range(130)) + "\r\n"
    requests = [
        ("LineTooLong", head + f"Authorization: Bearer {big_jwt}\r\n\r\n".encode()),
        ("BadHttpMessage", head + f"Authorization Bearer {STATIC_TOKEN}\r\n\r\n".encode()),
        ("BadStatusLine", f"GET /mcp?token={STATIC_TOKEN} HTTP/1.1 extra\r\n\r\n".encode()),
        ("BadHttpMessage", head + many.encode()),  # more than 128 headers
    ]
    secrets = {"the JWT's claims": claims[:40], "a static token": STATIC_TOKEN}
    auth = {
        "tokens": [{"token": STATIC_TOKEN, "principal": "alice"}],
        "jwt": {"jwks_file": issuer.write_jwks(tmp_path / "jwks.json", "r1"), "issuer": ISSUER},
    }
    async with run_proxy(tmp_path, auth=auth) as proxy:
        for kind, request in requests:
            answer = await _raw_exchange(proxy.port, request)
            assert answer.startswith(b"HTTP/1.0 400 ") or answer.startswith(b"HTTP/1.1 400 "), (
                kind,
                answer[:200],
            )
            for what, secret in secrets.items():
                assert secret.encode() not in answer, (kind, what)
        # Each refusal logged (as request_malformed; aiohttp's own: "Error handling request").
        await eventually(
            lambda: (
                sum(map(proxy.log_text().count, ("request_malformed", "Error handling")))
                >= len(requests)
            ),
            what="a log line for each refusal",
        )
        log_text = proxy.log_text()
    leaks = [what for what, secret in secrets.items() if secret in log_text]
    assert not leaks, f"secrets in the log: {leaks}"
    assert "Traceback" not in log_text
    kinds = [entry["error"] for entry in log_events(log_text, "request_malformed")]
    assert sorted(kinds) == sorted(kind for kind, _ in requests), kinds


async def test_an_upstream_urls_credentials_are_not_logged_at_start(tmp_path: Path) -> None:
    """The start line (``proxy_listening upstream=``) names the URL without its user info,
    query or fragment (it logged the URL as written, ``?key=`` and password included)."""
    password, key = "pw-8c1e4f0b7d2a", "key-5b9a3e1c7f04"
    url = f"http://user:{password}@127.0.0.1:9/mcp?key={key}#frag-{key}"
    async with run_proxy(tmp_path, upstream={"url": url}) as proxy:
        log_text = proxy.log_text()
    (listening,) = log_events(log_text, "proxy_listening")
    assert listening["upstream"] == "http://127.0.0.1:9/mcp"
    assert password not in log_text and key not in log_text


async def test_a_commands_arguments_from_the_environment_are_shown_as_written(
    tmp_path: Path,
) -> None:
    """``command: [..., "${VAR}"]`` is filled in when the server starts: the start line,
    each session's log and ``/status.json`` show ``${VAR}``, never what it held (they
    showed the value: an argument may be a credential)."""
    secret = "arg-secret-4e7c1a9b2d"
    config = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "upstream": {"command": [sys.executable, FIXTURE[1], "--tag", "${ARG_SECRET}"]},
        "log": {"format": "json", "level": "debug"},
    }
    async with (
        run_proxy_on(tmp_path, config, env={"ARG_SECRET": secret}) as proxy,
        aiohttp.ClientSession() as http,
    ):
        async with http.post(proxy.url, json=initialize_request(), headers=MCP_HEADERS) as resp:
            assert resp.status == 200, await resp.text()  # the server started, with it
        async with http.get(proxy.base + "/status.json") as resp:
            status = await resp.text()
        log_text = proxy.log_text()
    assert "${ARG_SECRET}" in log_text and "${ARG_SECRET}" in status
    assert secret not in log_text and secret not in status
