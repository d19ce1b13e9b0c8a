"""Injected faults, retries, hangs, error rates and latency, as the real SDK of the venv sees."""

from __future__ import annotations

from typing import Any

import pytest

from wm_middleware.emulator import EmulatorServer

from ..conftest import v3_only, v5_only, wait_until
from .conftest import KEY, OTHER_KEY, TAG, async_client, sync_client

supermemory = pytest.importorskip("supermemory")


@v3_only
class TestV3:
    """supermemory 3.x."""

    def test_retry_then_success(self, server: EmulatorServer) -> None:
        client = sync_client(server, max_retries=2)
        server.fail_next(2, 503, path="/v4/search", retry_after=0.001)
        res = client.search.memories(q="allergy", container_tag=TAG)
        assert res.results[0].memory == "User has a severe peanut allergy"
        assert server.count("POST", "/v4/search") == 3

    def test_errors_raise_sdk_exceptions(self, server: EmulatorServer) -> None:
        client = sync_client(server, max_retries=1)
        server.fail_next(None, 500, path="/v4/search", retry_after=0.001)
        with pytest.raises(supermemory.InternalServerError) as info:
            client.search.memories(q="allergy")
        assert info.value.status_code == 500
        assert server.count("POST", "/v4/search") == 2  # original + 1 retry
        server.clear_faults()
        server.fail_next(1, 429, retry_after=0.001)
        with pytest.raises(supermemory.RateLimitError) as rl:
            sync_client(server).search.memories(q="allergy")
        assert rl.value.response.headers["retry-after"] == "1"
        assert rl.value.response.headers["retry-after-ms"] == "1"
        server.api_keys = frozenset({KEY})
        with pytest.raises(supermemory.AuthenticationError):
            sync_client(server, api_key=OTHER_KEY).search.memories(q="x")

    async def test_async_retry_and_rate_limit(self, server: EmulatorServer) -> None:
        server.fail_next(1, 500, retry_after=0.001)
        async with async_client(server, max_retries=1) as client:
            res = await client.search.memories(q="hiking", container_tag=TAG)
        assert res.results[0].memory.startswith("User likes hiking")
        assert server.count("POST", "/v4/search") == 2

    def test_hang_triggers_client_timeout(self, server: EmulatorServer) -> None:
        server.hang_next(1, 30.0, path="/v4/search")
        client = sync_client(server, timeout=0.3)
        with pytest.raises(supermemory.APITimeoutError):
            client.search.memories(q="allergy")
        # The request the client gave up on may reach the server only after it gave up.
        wait_until(lambda: server.faults.hangs == 1)
        # the next request is served normally (with room for a loaded machine)
        assert client.with_options(timeout=10.0).search.memories(q="allergy").results

    def test_error_rate_is_seeded(self, server: EmulatorServer) -> None:
        client = sync_client(server)
        server.set_error_rate(1.0, statuses=[502], seed=3)
        with pytest.raises(supermemory.InternalServerError) as info:
            client.search.memories(q="allergy")
        assert info.value.status_code == 502
        server.set_error_rate(0.0)
        assert client.search.memories(q="allergy").results

    def test_latency_is_applied(self, server: EmulatorServer) -> None:
        server.set_latency((0.001, 0.002), seed=5)
        client = sync_client(server)
        client.search.memories(q="allergy")
        client.search.memories(q="allergy")
        assert server.latency_applied == 2
        assert server.stats()["latency"]["applied"] == 2


@v5_only
class TestV5:
    """supermemory 5.x."""

    def test_errors_raise_sdk_exceptions(self, server: EmulatorServer) -> None:
        client = sync_client(server)
        server.fail_next(1, 500)
        with pytest.raises(supermemory.InternalServerError) as info:
            client.search(TAG, query="allergy")
        assert info.value.status_code == 500
        server.fail_next(1, 429, retry_after=0)
        with pytest.raises(supermemory.RateLimitError):
            client.search(TAG, query="allergy")
        server.fail_next(1, 503)
        with pytest.raises(supermemory.APIStatusError) as unavailable:
            client.search(TAG, query="allergy")
        assert unavailable.value.status_code == 503
        assert server.count("POST", f"/ns/{TAG}/search") == 3  # max_retries=0: no retries
        server.api_keys = frozenset({KEY})
        with pytest.raises(supermemory.AuthenticationError):
            sync_client(server, api_key=OTHER_KEY).search(TAG, query="x")

    def test_retry_happens(self, server: EmulatorServer) -> None:
        # The 5.x SDK only honours integer Retry-After; 0 falls back to ~1 s backoff.
        server.fail_next(1, 503, retry_after=1)
        client = sync_client(server, max_retries=1)
        assert client.search(TAG, query="allergy").results
        assert server.count("POST", f"/ns/{TAG}/search") == 2

    async def test_async_errors(self, server: EmulatorServer) -> None:
        server.fail_next(1, 500, path=f"/ns/{TAG}/profile")
        async with async_client(server) as client:
            with pytest.raises(supermemory.InternalServerError):
                await client.profile(TAG)
            assert (await client.profile(TAG)).profile.static

    def test_hang_triggers_client_timeout(self, server: EmulatorServer) -> None:
        server.hang_next(1, 30.0, path=f"/ns/{TAG}/search")
        client = sync_client(server, timeout=0.3)
        with pytest.raises(supermemory.APITimeoutError):
            client.search(TAG, query="allergy")
        wait_until(lambda: server.faults.hangs == 1)  # it may arrive after the client gave up
        assert client.with_options(timeout=10.0).search(TAG, query="allergy").results

    def test_latency_is_applied(self, server: EmulatorServer) -> None:
        server.set_latency(0.001)
        client = sync_client(server)
        client.search(TAG, query="allergy")
        assert server.latency_applied == 1


def test_reset_zeroes_the_counts_of_injected_errors_and_hangs(server: EmulatorServer) -> None:
    """A test that counts hangs or injected errors sees only its own, whatever ran before."""
    path = "/v4/search" if supermemory.__version__.startswith("3.") else f"/ns/{TAG}/search"
    server.hang_next(1, 0.01, path=path)
    server.fail_next(1, 503, path=path)
    client = sync_client(server)
    _search(client)  # waits 10 ms, then answers
    with pytest.raises(supermemory.InternalServerError):
        _search(client)
    assert (server.faults.injected, server.faults.hangs) == (1, 1)
    server.reset()
    assert (server.faults.injected, server.faults.hangs) == (0, 0)
    assert server.stats()["faults"]["hangs"] == 0


def _search(client: Any) -> Any:
    if supermemory.__version__.startswith("3."):
        return client.search.memories(q="allergy", container_tag=TAG)
    return client.search(TAG, query="allergy")
