"""proxy/core/tool_policy.py: which names a principal is shown and may use, and by which
names; what a hidden one is refused with; list answers filtered page by page."""

from __future__ import annotations

import string
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.modern_errors import modern_error
from proxy.core.tool_policy import (
    OPEN,
    Forward,
    Kind,
    Policy,
    Refuse,
    Rules,
    ScopeRule,
    refusal,
)

ADMIN = ScopeRule("mcp:admin", ("delete_*",))


def tools(**rules: Any) -> Policy:
    return Policy(tools=Rules(Kind.TOOL, **rules))


def listed(policy: Policy, names: list[str], scopes: frozenset[str] | None = None) -> list[str]:
    result = {"tools": [{"name": n, "inputSchema": {}} for n in names], "nextCursor": "c2"}
    answer = policy.view(scopes).answer("tools/list", result)
    assert answer["nextCursor"] == "c2"  # pagination is the server's, untouched
    return [t["name"] for t in answer["tools"]]


def test_allow_and_deny_globs_deny_wins() -> None:
    policy = tools(allow=("read_*", "search", "get_?"), deny=("read_secret*",))
    names = ["read_file", "read_secret_key", "search", "searches", "get_x", "get_xy", "write"]
    assert listed(policy, names) == ["read_file", "search", "get_x"]
    assert tools(deny=("[dw]*",)).tools.permits("echo", None)
    assert not tools(deny=("[dw]*",)).tools.permits("write", None)
    assert not tools(allow=()).tools.permits("echo", None)  # an empty allow list: nothing


def test_globs_are_case_sensitive_and_whole_names() -> None:
    rules = tools(allow=("Echo*",)).tools
    assert rules.permits("Echo2", None)
    assert not rules.permits("echo", None)
    assert not rules.permits("xEcho", None)


def test_a_rename_wins_over_the_prefix_and_is_called_back_by_its_new_name() -> None:
    policy = tools(rename={"echo": "say"}, prefix="demo_")
    assert listed(policy, ["echo", "countdown"]) == ["say", "demo_countdown"]
    view = policy.view(None)
    assert view.request("tools/call", {"name": "say", "arguments": {}}) == Forward("name", "echo")
    assert view.request("tools/call", {"name": "demo_countdown"}) == Forward("name", "countdown")
    for old_or_unknown in ("echo", "demo_echo", "countdown", "nope"):
        decided = view.request("tools/call", {"name": old_or_unknown})
        assert decided == Refuse(refusal(Kind.TOOL, old_or_unknown)), old_or_unknown


def test_a_name_a_rename_took_hides_the_tool_that_had_it() -> None:
    """``b`` renamed to ``a``: the server's own ``a`` cannot be called by its name any more,
    so it is not listed (a call for ``a`` reaches ``b``)."""
    policy = tools(rename={"b": "a"})
    assert listed(policy, ["a", "b", "c"]) == ["a", "c"]
    assert policy.view(None).request("tools/call", {"name": "a"}) == Forward("name", "b")


def test_scope_rules_limit_only_credentials_with_scopes() -> None:
    policy = tools(require=(ADMIN, ScopeRule("mcp:write", ("delete_*", "put"))))
    names = ["delete_repo", "put", "get"]
    assert listed(policy, names, None) == names  # a static token, or auth off
    assert listed(policy, names, frozenset()) == ["get"]
    assert listed(policy, names, frozenset({"mcp:write"})) == ["put", "get"]
    assert listed(policy, names, frozenset({"mcp:admin", "mcp:write"})) == names
    view = policy.view(frozenset({"mcp:write"}))
    assert view.request("tools/call", {"name": "delete_repo"}) == Refuse(
        {"code": -32602, "message": "Unknown tool: delete_repo"}
    )
    assert view.request("tools/call", {"name": "put"}) is None


def test_refusals_are_the_servers_for_what_it_does_not_have() -> None:
    assert refusal(Kind.TOOL, "x") == {"code": -32602, "message": "Unknown tool: x"}
    assert refusal(Kind.PROMPT, "p") == {"code": -32602, "message": "Unknown prompt: p"}
    assert refusal(Kind.RESOURCE, "file:///a") == {
        "code": -32002,
        "message": "Resource not found",
        "data": {"uri": "file:///a"},
    }
    # a modern client gets it as it gets a legacy server's -32002
    assert modern_error(refusal(Kind.RESOURCE, "u"))["code"] == -32602
    assert len(refusal(Kind.TOOL, "n" * 10_000)["message"]) < 300


def test_prompts_and_completion_refs() -> None:
    policy = Policy(prompts=Rules(Kind.PROMPT, deny=("secret*",), prefix="p_"))
    view = policy.view(None)
    answer = view.answer("prompts/list", {"prompts": [{"name": "greet"}, {"name": "secret"}]})
    assert answer == {"prompts": [{"name": "p_greet"}]}
    assert view.request("prompts/get", {"name": "p_greet"}) == Forward("name", "greet")
    assert isinstance(view.request("prompts/get", {"name": "p_secret"}), Refuse)
    ref = {"ref": {"type": "ref/prompt", "name": "p_greet"}, "argument": {"name": "a"}}
    decided = view.request("completion/complete", ref)
    assert isinstance(decided, Forward)
    assert decided.applied(ref)["ref"] == {"type": "ref/prompt", "name": "greet"}
    assert isinstance(
        view.request("completion/complete", {"ref": {"type": "ref/prompt", "name": "greet"}}),
        Refuse,
    )
    assert view.request("tools/call", {"name": "anything"}) is None  # tools: no rules


def test_resources_by_uri_glob() -> None:
    policy = Policy(
        resources=Rules(
            Kind.RESOURCE,
            allow=("file:///public/*", "mem://*"),
            deny=("*.key",),
            require=(ScopeRule("files:mem", ("mem://*",)),),
        )
    )
    view = policy.view(frozenset())
    result = {
        "resources": [
            {"uri": "file:///public/a/b.txt"},
            {"uri": "file:///public/x.key"},
            {"uri": "file:///private/c"},
            {"uri": "mem://one"},
        ]
    }
    assert view.answer("resources/list", result) == {
        "resources": [{"uri": "file:///public/a/b.txt"}]
    }
    templates = {
        "resourceTemplates": [{"uriTemplate": "file:///public/{p}"}, {"uriTemplate": "x://{y}"}]
    }
    assert view.answer("resources/templates/list", templates) == {
        "resourceTemplates": [{"uriTemplate": "file:///public/{p}"}]
    }
    for method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
        assert view.request(method, {"uri": "file:///public/a"}) is None
        assert view.request(method, {"uri": "mem://one"}) == Refuse(
            refusal(Kind.RESOURCE, "mem://one")
        )
    assert policy.view(frozenset({"files:mem"})).uris(["mem://one", "file:///x"]) == ["mem://one"]
    assert view.shows_update({"uri": "file:///public/a"})
    assert not view.shows_update({"uri": "mem://one"})
    assert OPEN.view(frozenset()).shows_update({"uri": "mem://one"})


def test_malformed_requests_and_answers_are_left_to_the_server() -> None:
    view = tools(deny=("x",)).view(None)
    assert view.request("tools/call", {"name": 7}) is None
    assert view.request("tools/call", {}) is None
    assert view.answer("tools/list", {"tools": "nope"}) == {"tools": "nope"}
    assert view.answer("tools/list", ["odd"]) == ["odd"]
    # an item without a name cannot be judged: not shown
    assert view.answer("tools/list", {"tools": [{"title": "t"}, "s", {"name": "y"}]}) == {
        "tools": [{"name": "y"}]
    }
    assert view.answer("tools/call", {"content": []}) == {"content": []}


def test_no_rules_change_nothing() -> None:
    view = OPEN.view(frozenset())
    result = {"tools": [{"name": "a"}, {"nameless": 1}]}
    assert view.inert
    assert view.answer("tools/list", result) is result
    assert view.request("tools/call", {"name": "a"}) is None


def test_two_renames_to_one_name_are_refused() -> None:
    try:
        Rules(Kind.TOOL, rename={"a": "x", "b": "x"})
    except ValueError:
        return
    raise AssertionError("accepted")


# ---------------------------------------------------------------- properties
NAME = st.text(alphabet=string.ascii_lowercase[:4] + "_", min_size=1, max_size=4)
GLOB = st.text(alphabet="ab_*?", min_size=1, max_size=3)
SCOPES = st.frozensets(st.sampled_from(["s1", "s2", "s3"]))


@st.composite
def rules(draw: st.DrawFn) -> Rules:
    olds = draw(st.lists(NAME, unique=True, max_size=4))
    news = draw(st.lists(NAME, unique=True, min_size=len(olds), max_size=len(olds)))
    return Rules(
        Kind.TOOL,
        allow=draw(st.none() | st.tuples(GLOB, GLOB)),
        deny=draw(st.lists(GLOB, max_size=2).map(tuple)),
        rename=dict(zip(olds, news, strict=True)),
        prefix=draw(st.sampled_from(["", "a", "p_"])),
        require=tuple(
            ScopeRule(s, (g,))
            for s, g in draw(st.lists(st.tuples(st.sampled_from(["s1", "s2"]), GLOB), max_size=2))
        ),
    )


@settings(max_examples=100, deadline=None)  # no timing: a loaded machine is slow
@given(rules(), st.lists(NAME, unique=True), st.none() | SCOPES)
def test_every_shown_name_leads_back_to_its_own_tool_only(
    r: Rules, names: list[str], scopes: frozenset[str] | None
) -> None:
    view = Policy(tools=r).view(scopes)
    shown = view.answer("tools/list", {"tools": [{"name": n} for n in names]})["tools"]
    assert len({t["name"] for t in shown}) == len(shown)  # no two tools shown alike
    back = {}
    for n in names:
        s = view.shown(Kind.TOOL, n)
        if s is not None:
            assert view.server_name(Kind.TOOL, s) == n
            back[s] = n
    assert [t["name"] for t in shown] == [
        view.shown(Kind.TOOL, n) for n in names if n in back.values()
    ]
    for s in [t["name"] for t in shown] + names + [r.prefix + n for n in names]:
        decided = view.request("tools/call", {"name": s})
        target = s if decided is None else decided.value if isinstance(decided, Forward) else None
        if s in back:
            assert target == back[s]  # a listed name reaches the tool listed so
        if target is not None:
            assert view.shown(Kind.TOOL, target) == s  # only by the name it is shown


@settings(max_examples=100, deadline=None)  # no timing: a loaded machine is slow
@given(rules(), NAME, SCOPES, SCOPES)
def test_more_scopes_never_hide_more(
    r: Rules, name: str, a: frozenset[str], b: frozenset[str]
) -> None:
    if r.permits(name, a):
        assert r.permits(name, a | b)
        assert r.permits(name, None)  # unscoped credentials: only the operator's rules


@settings(max_examples=100, deadline=None)  # no timing: a loaded machine is slow
@given(rules(), NAME, st.none() | SCOPES)
def test_deny_always_wins(r: Rules, name: str, scopes: frozenset[str] | None) -> None:
    denied = Rules(Kind.TOOL, allow=r.allow, deny=(*r.deny, name), rename=r.rename, prefix=r.prefix)
    assert not denied.permits(name, scopes)
