"""Fixtures of the whole suite: the seed of the randomized tests; the environment every
proxy the tests start inherits.

Every test that draws random numbers takes the ``seed`` fixture and builds its own
``random.Random(seed)``. The seed is ``--seed N`` if given, else ``$TEST_SEED``, else a
fresh one; it is printed (pytest shows it with a failure's captured output) and recorded
as the test's ``seed`` property, so a failure replays with ``pytest --seed N TEST``.
"""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator

import pytest
from hypothesis import settings

from proxy.store.memory import MemoryStore
from tests.longest import longest_first
from tests.oauth_as import oauth_server  # noqa: F401  (a fixture)
from tests.redis_cluster import redis_cluster, redis_cluster_url  # noqa: F401  (fixtures)
from tests.redis_server import redis_url  # noqa: F401  (a fixture: pytest finds it here)

SEED_ENV = "TEST_SEED"

# Hypothesis' default 200 ms deadline per example is a timed assertion: on a loaded 2-core
# box (xdist workers beside real servers) one example of a property test sometimes takes
# longer and fails the test for no fault of the code. The properties stay; the clock goes.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

# Every proxy a test starts stops at once on SIGTERM, as it did before drains existed
# (listen.drain_seconds); a test of the drain sets its own in its proxy's environment.
os.environ["MCP_RESUME_PROXY_DRAIN_SECONDS"] = "0"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    longest_first(items)  # the long files first (tests/longest.py)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--seed",
        type=int,
        default=None,
        help=f"seed of the randomized tests (default: ${SEED_ENV}, else a random one)",
    )


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """The seed of this test's random choices; printed so that a failure can be replayed."""
    chosen: int | None = request.config.getoption("--seed")
    if chosen is None:
        from_env = os.environ.get(SEED_ENV)
        chosen = int(from_env) if from_env else random.randrange(2**32)
    print(f"seed={chosen} (replay: pytest --seed {chosen} '{request.node.nodeid}')")
    request.node.user_properties.append(("seed", chosen))
    return chosen


@pytest.fixture
async def memory_store() -> AsyncIterator[MemoryStore]:
    """An opened memory store, closed after the test."""
    store = MemoryStore()
    await store.open()
    yield store
    await store.close()
