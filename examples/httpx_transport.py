"""A plain ``httpx`` client speaking the Supermemory HTTP API, cached by ``CachingTransport``.

    python examples/httpx_transport.py
    SUPERMEMORY_API_KEY=sm_... python examples/httpx_transport.py

For code that calls the REST API without the SDK. Reads (``/v4/search``, ``/v4/profile``, ...)
with a 2xx answer are cached per credentials and body; writes sent through the same client
invalidate. Every hit is a fresh ``httpx.Response``.

Environment: either SDK's, e.g. ``python3 -m pip install -e '.[demo]'`` (the emulator is in it).
"""

from __future__ import annotations

import httpx

from wm_middleware import CachingTransport
from wm_middleware.emulator import supermemory_target

CONTAINER_TAG = "user-alex"
MEMORIES = ["Alex has a severe peanut allergy."]
# Where the SDKs send requests when SUPERMEMORY_BASE_URL is not set.
SUPERMEMORY_API = "https://api.supermemory.ai"


def main() -> None:
    # The real API with SUPERMEMORY_API_KEY, else an emulator seeded with MEMORIES.
    with supermemory_target(MEMORIES, container_tag=CONTAINER_TAG) as (api_key, base_url):
        transport = CachingTransport()  # wraps httpx.HTTPTransport()
        with httpx.Client(
            base_url=base_url or SUPERMEMORY_API,
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
