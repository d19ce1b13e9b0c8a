"""``instrument(shared=...)`` and ``wrap(client, shared=...)``: what they accept, refused at once.

A URL becomes a ``RedisTier`` (tested against a real server in tests/shared); here, the boundary:
a tier object is used as given, anything else is a clear error before anything is patched or
copied, and ``shared`` beside a ``working_memory`` of another tier is refused.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import wm_middleware
from tests.core.test_shared_tier_hook import LocalTier
from wm_middleware import WorkingMemory, WorkingMemoryInstrumentor
from wm_middleware.emulator import EmulatorServer

from ..conftest import python
from .conftest import Generation, done


@pytest.fixture
def not_instrumented() -> Iterator[None]:
    wm_middleware.uninstrument()
    yield
    wm_middleware.uninstrument()


def _wrap(**kwargs: Any) -> Any:
    import supermemory

    return wm_middleware.wrap(supermemory.Supermemory(api_key="sk-a"), **kwargs)


def _instrument(**kwargs: Any) -> Any:
    return wm_middleware.instrument(**kwargs)


ENTRY_POINTS = [pytest.param(_instrument, id="instrument"), pytest.param(_wrap, id="wrap")]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize(
    ("shared", "error", "message"),
    [
        (6379, TypeError, "shared must be a redis:// URL or a RedisTier, not int"),
        (b"redis://x", TypeError, "shared must be a redis:// URL or a RedisTier, not bytes"),
        ("http://cache:6379", ValueError, "shared must be a redis://, rediss:// or unix:// URL"),
        ("localhost:6379", ValueError, "shared must be a redis://, rediss:// or unix:// URL"),
        ("redis://cache:6379/abc", ValueError, "shared must name its database as a number"),
    ],
)
def test_a_shared_that_is_neither_a_url_nor_a_tier_is_refused(
    not_instrumented: None, entry: Any, shared: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        entry(shared=shared)
    assert not WorkingMemoryInstrumentor().is_instrumented_by_opentelemetry


def test_a_refused_url_never_shows_its_password(not_instrumented: None) -> None:
    with pytest.raises(ValueError, match="http://user:\\*\\*\\*@cache") as raised:
        wm_middleware.instrument(shared="http://user:hunter2@cache:6379")
    assert "hunter2" not in str(raised.value)


def test_a_url_without_redis_py_installed_names_the_extra() -> None:
    program = (
        "import sys; sys.modules['redis'] = None\n"  # as if redis-py were not installed
        "import wm_middleware\n"
        "try:\n"
        "    wm_middleware.instrument(shared='redis://127.0.0.1:6379')\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    expected = "shared needs redis-py: pip install 'wm-middleware[redis]'"
    assert python(program).stdout.strip() == expected


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_shared_beside_a_working_memory_of_another_tier_is_refused(
    not_instrumented: None, entry: Any
) -> None:
    with pytest.raises(ValueError, match="pass shared= to the WorkingMemory you give"):
        entry(working_memory=WorkingMemory(), shared=LocalTier())
    tier = LocalTier()
    memory: WorkingMemory[Any] = WorkingMemory(shared=tier)
    used = entry(working_memory=memory, shared=tier)  # the same tier: nothing to choose
    assert (used if isinstance(used, WorkingMemory) else used.working_memory) is memory


async def test_a_tier_given_to_instrument_or_wrap_serves_the_sdks_reads(
    not_instrumented: None, emulator: EmulatorServer, generation: Generation, mode: str
) -> None:
    generation.seed(emulator)
    tier = LocalTier()
    memory = wm_middleware.instrument(shared=tier)
    assert memory.shared is tier
    await done(generation.search(generation.client(mode, emulator.base_url)))
    wm_middleware.uninstrument()
    assert tier.loads() == 1
    # Another process's view: a wrapped client with its own memory on the same tier.
    wrapped = wm_middleware.wrap(generation.client(mode, emulator.base_url), shared=tier)
    assert wrapped.working_memory.shared is tier
    before = generation.searches(emulator)
    await done(generation.search(wrapped))
    assert generation.searches(emulator) == before
    assert wrapped.working_memory.stats().shared_hits == 1
