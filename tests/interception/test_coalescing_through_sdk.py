"""Concurrent identical reads through the SDK share one upstream request, under either SDK.

Each caller still gets an object of its own. Async callers gather on one loop; sync callers are
20 real threads released together. The one request is held until the 19 others have joined it,
so that none comes after the answer however loaded the machine is.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from wm_middleware import WorkingMemory
from wm_middleware.emulator import EmulatorServer

from ..conftest import holding
from .conftest import Generation


async def test_concurrent_identical_searches_share_one_request(
    emulator: EmulatorServer, generation: Generation, instrumented: WorkingMemory[Any], mode: str
) -> None:
    generation.seed(emulator)
    joined = lambda: instrumented.stats().coalesced == 19  # noqa: E731
    client = generation.client(mode, emulator.base_url, http_client=holding(joined, mode))
    if mode == "async":
        results = await asyncio.gather(*(generation.search(client) for _ in range(20)))
    else:
        barrier = threading.Barrier(20)

        def search(_: int) -> Any:
            barrier.wait()
            return generation.search(client)

        with ThreadPoolExecutor(20) as pool:
            results = await asyncio.to_thread(lambda: list(pool.map(search, range(20))))
    assert generation.searches(emulator) == 1
    assert len({id(result) for result in results}) == 20  # each caller its own object
    assert all(result.model_dump() == results[0].model_dump() for result in results)
    assert instrumented.stats().coalesced == 19
