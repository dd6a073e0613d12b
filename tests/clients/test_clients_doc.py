"""docs/clients.md shows exactly the client matrix's expected table (tests/clients/expected.py),
as ``scripts/clients-table`` generates it: the docs claim what the matrix tests measure."""

from __future__ import annotations

from tests.clients.table import DOC, markdown, section


def test_docs_show_the_expected_table() -> None:
    assert section(DOC.read_text()) == markdown(), (
        "docs/clients.md is not the generated table: run scripts/clients-table --write"
    )
