"""What a reload changes, decided from two configs alone (proxy/reload_plan.py)."""

from __future__ import annotations

from typing import Any

from proxy.config import Config, config_from_mapping
from proxy.reload_plan import RESTART_ONLY, changed_paths, plan_reload


def _config(**sections: Any) -> Config:
    base: dict[str, Any] = {"servers": {"a": {"command": ["a"]}, "b": {"command": ["b"]}}}
    base.update(sections)
    return config_from_mapping(base)


def test_servers_added_removed_and_changed_are_named() -> None:
    old = _config()
    new = _config(servers={"a": {"command": ["a2"]}, "c": {"command": ["c"]}})
    plan = plan_reload(old, new)
    assert (plan.added, plan.removed, plan.changed) == (("c",), ("b",), ("a",))
    assert not plan.refused and plan.changed_keys == ()


def test_an_unchanged_file_changes_nothing() -> None:
    plan = plan_reload(_config(), _config())
    assert plan.summary() == {"added": [], "removed": [], "changed": [], "settings": []}


def test_settings_a_reload_applies_are_named_by_key_path_never_by_value() -> None:
    new = _config(
        auth={"tokens": [{"token": "s3cret-token-value!!", "principal": "p"}]},
        sessions={"max_sessions": 3},
        log={"level": "debug"},
    )
    plan = plan_reload(_config(), new)
    assert not plan.refused
    assert plan.changed_keys == ("sessions.max_sessions", "auth.tokens", "log.level")
    assert "s3cret" not in repr(plan.summary())


def test_what_only_a_restart_applies_refuses_the_reload_naming_each_key() -> None:
    new = _config(
        listen={"port": 9999, "allowed_hosts": ["x"]},
        store={"kind": "sqlite"},
        streams={"token_secret": "0123456789abcdef0123"},
        modern={"pool": {"size": 2}},
    )
    plan = plan_reload(_config(), new)
    assert plan.refused
    assert plan.restart_only == (
        "listen.port",
        "streams.token_secret",
        "store.kind",
        "modern.pool.size",
    )
    assert "listen.allowed_hosts" in plan.changed_keys  # applies at once


def test_a_single_upstream_becoming_named_servers_is_a_removal_and_additions() -> None:
    old = config_from_mapping({"upstream": {"command": ["a"]}})
    plan = plan_reload(old, _config())
    assert (plan.added, plan.removed) == (("a", "b"), ("default",))


def test_changed_paths_names_a_mapping_whose_keys_differ_as_a_whole() -> None:
    old = {"env": {"A": "1"}, "x": {"y": 1, "z": 2}}
    new = {"env": {"B": "1"}, "x": {"y": 1, "z": 3}}
    assert list(changed_paths(old, new)) == ["env", "x.z"]


def test_every_restart_only_key_names_a_real_setting() -> None:
    data = Config().__dataclass_fields__
    for key in RESTART_ONLY:
        section, _, rest = key.partition(".")
        assert section in data, key
        if rest:
            assert rest in getattr(Config(), section).__dataclass_fields__, key
