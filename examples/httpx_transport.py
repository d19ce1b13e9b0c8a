"""A plain ``httpx`` client speaking the Supermemory HTTP API, cached by ``CachingTransport``.

    python examples/httpx_transport.py
    SUPERMEMORY_API_KEY=sm_... python examples/httpx_transport.py

For code that calls the REST API without the SDK. Reads (``/v4/search``, ``/v4/profile``, ...)
with a 2xx answer are cached per credentials and body; writes sent through the same client
invalidate. Every hit is a fresh ``httpx.Response``.

Environment: either SDK's, e.g. ``python3 -m pip install -e '.[demo]'`` (the emulator is in it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from wm_middleware import CachingTransport

CONTAINER_TAG = "user-alex"


@contextmanager
def supermemory_target() -> Iterator[tuple[str, str]]:
    """(api_key, base_url): the real API when SUPERMEMORY_API_KEY is set, else an emulator."""
    api_key = os.environ.get("SUPERMEMORY_API_KEY")
    if api_key:
        yield api_key, os.environ.get("SUPERMEMORY_BASE_URL", "https://api.supermemory.ai")
        return
    from wm_middleware.emulator import EmulatorServer

    with EmulatorServer(latency=0.05) as server:
        server.seed(
            "sk-example", ["Alex has a severe peanut allergy."], container_tag=CONTAINER_TAG
        )
        print(f"(no SUPERMEMORY_API_KEY: using the emulator at {server.base_url})")
        yield "sk-example", server.base_url


def main() -> None:
    with supermemory_target() as (api_key, base_url):
        transport = CachingTransport()  # wraps httpx.HTTPTransport()
        with httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {api_key}"},
            transport=transport,
        ) as client:
            body = {"q": "peanut allergy", "containerTag": CONTAINER_TAG, "limit": 5}
            for attempt in ("first", "second"):
                response = client.post("/v4/search", json=body)
                response.raise_for_status()
                results = response.json().get("results", [])
                print(f"{attempt} POST /v4/search: {response.status_code}, {len(results)} results")
        print(transport.working_memory.stats())  # CacheStats(hits=1, misses=1, ...)


if __name__ == "__main__":
    main()
