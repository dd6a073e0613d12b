"""``@record``: a value class the type checker sees as a frozen dataclass and the runtime
builds at a plain dataclass's cost.

The events and commands a session trades (:mod:`proxy.core.events`), the messages it
classifies (:class:`~proxy.core.jsonrpc.Message`) and the requests it keeps in flight
(:class:`~proxy.core.idmap.PendingRequest`) are made several times per call. A frozen
dataclass's ``__init__`` sets each field through ``object.__setattr__`` (a lookup and a
wrapper call per field, ~3 times a plain attribute store): ~30 fields per legacy call,
~22k instructions of the core's ~175k (issue 23, fifth pass, bench/README.md).

So a record is frozen for mypy (PEP 681 ``frozen_default``: ``mypy --strict`` refuses an
assignment to a field, as it would on ``frozen=True``), and at runtime a slotted dataclass
with the same ``__eq__`` and ``__hash__`` as a frozen one (``unsafe_hash``: a hash of the
fields). What is not checked at runtime is an assignment the type checker let through
(``setattr`` by name, ``Any``): the core makes none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

_T = TypeVar("_T")

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: object) -> object:
        return lambda decorator: decorator


@dataclass_transform(frozen_default=True)
def record(cls: type[_T]) -> type[_T]:
    """``cls`` as a slotted dataclass, hashable by its fields, frozen for the type checker."""
    return dataclass(slots=True, unsafe_hash=True)(cls)
