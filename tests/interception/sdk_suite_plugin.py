"""A pytest plugin that runs a test suite under ``wm_middleware.instrument()``.

Loaded by ``sdk_suites.py`` beside it (``-p sdk_suite_plugin``, this directory on the path)
when it runs a supermemory SDK's own test suite the second time. The middleware is applied before
any test runs and removed after the last; its working memory is cleared around every test, so no
test sees another's entries. At the end it writes what the memory saw to the file named by
``WM_SUITE_STATS`` (JSON) and whether the SDK was patched, so the runner can tell the suite
really ran through the middleware.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import pytest

import wm_middleware
from wm_middleware import WorkingMemory

_MEMORY: list[WorkingMemory[Any]] = []


_PATCHED: list[bool] = []


def pytest_configure(config: pytest.Config) -> None:
    _MEMORY.append(wm_middleware.instrument())
    _PATCHED.append(_sdk_patched())


def _sdk_patched() -> bool:
    """True when the installed SDK's request path is wrapped (3.x ``request``, 5.x ``search``)."""
    try:
        from supermemory._base_client import SyncAPIClient

        return hasattr(vars(SyncAPIClient)["request"], "__wrapped__")
    except ImportError:
        from supermemory.client import Supermemory

        return hasattr(vars(Supermemory)["search"], "__wrapped__")


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _MEMORY:
        return
    memory = _MEMORY.pop()
    target = os.environ.get("WM_SUITE_STATS")
    if target:
        with open(target, "w", encoding="utf-8") as file:
            json.dump({"instrumented": all(_PATCHED), **asdict(memory.stats())}, file)
    wm_middleware.uninstrument()


@pytest.fixture(autouse=True)
def _wm_fresh_memory() -> Iterator[None]:
    """Every test starts and ends with an empty working memory."""
    for memory in _MEMORY:
        memory.clear()
    yield
    for memory in _MEMORY:
        memory.clear()
