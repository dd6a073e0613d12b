"""tests/longest.py names files that exist, once each, and puts them first."""

from __future__ import annotations

from pathlib import Path

from tests.longest import LONGEST_FIRST, longest_first

ROOT = Path(__file__).resolve().parent.parent


def test_every_listed_file_exists_once() -> None:
    missing = [path for path in LONGEST_FIRST if not (ROOT / path).is_file()]
    assert missing == [], f"tests/longest.py names files that are gone: {missing}"
    assert len(set(LONGEST_FIRST)) == len(LONGEST_FIRST)


class _Item:
    def __init__(self, nodeid: str) -> None:
        self.nodeid = nodeid


def test_listed_files_go_first_and_each_files_tests_keep_their_order() -> None:
    first, second = LONGEST_FIRST[0], LONGEST_FIRST[1]
    ids = ["tests/a.py::t1", f"{second}::x", "tests/a.py::t2", f"{first}::y", f"{second}::z"]
    items = [_Item(nodeid) for nodeid in ids]
    longest_first(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == [
        f"{first}::y",
        f"{second}::x",
        f"{second}::z",
        "tests/a.py::t1",
        "tests/a.py::t2",
    ]
