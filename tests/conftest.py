"""Fixtures every test folder shares.

`rng` is the one source of random test data: a numpy Generator seeded from the test's node id, so a
test draws the same data on every run and machine, and two tests (or two parameters of one test)
draw different data. `pytest --seed N` seeds every test with N instead, to explore other draws or to
rerun a failure with the seed its report printed.
"""

from __future__ import annotations

import zlib
from collections.abc import Generator

import numpy as np
import pytest

SEED_PROPERTY = "rng_seed"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--seed", type=int, default=None, metavar="N",
                     help="seed every test's `rng` fixture with N (default: a hash of the test's node id)")


def seed_for(nodeid: str, chosen: int | None) -> int:
    """The seed of a test: `chosen` when given, else a CRC-32 of its node id (stable across runs,
    unlike Python's salted hash())."""
    return chosen if chosen is not None else zlib.crc32(nodeid.encode())


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """The test's seed (recorded, so that a failing test's report prints it)."""
    value = seed_for(request.node.nodeid, request.config.getoption("--seed"))
    request.node.user_properties.append((SEED_PROPERTY, value))
    return value


@pytest.fixture
def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator[None, None, None]:
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    for key, seed in item.user_properties:
        if key == SEED_PROPERTY:
            report.sections.append(("rng seed", f"seed={seed} (rerun with --seed {seed})"))
