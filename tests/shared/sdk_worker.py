"""An application process with ``instrument(shared=url)``, driven by a test (importable: spawn).

It serves commands from a queue until told to quit, so a test can interleave what two processes
do: ``search`` and ``add`` through the installed supermemory SDK (3.x or 5.x), ``stats`` of its
working memory. Replies carry the SDK's own return value and the memory's statistics.
"""

from __future__ import annotations

import time
from typing import Any

from tests.interception.conftest import Generation


def serve(redis_url: str, base_url: str, major: str, requests: Any, replies: Any) -> None:
    import supermemory

    import wm_middleware

    from .tiers import patient_url_tiers

    patient_url_tiers()  # the subject is what the tier shares, not its timeout
    memory = wm_middleware.instrument(shared=redis_url)
    deadline = time.monotonic() + 30  # a bound, not a measurement
    while not memory.shared.subscribed and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.005)
    generation = Generation(major)
    clients: dict[str, Any] = {}
    replies.put(("ready", None, memory.stats()))
    while True:
        command, api_key, tag = requests.get()
        if command == "quit":
            break
        client = clients.get(api_key)
        if client is None:
            client = clients[api_key] = supermemory.Supermemory(
                api_key=api_key, base_url=base_url, max_retries=0
            )
        try:
            if command == "search":
                value: Any = generation.search(client, tag)
            elif command == "add":
                value = generation.add(client, tag)
            else:
                value = None
        except Exception as error:  # the test sees it as the reply
            value = error
        replies.put((command, value, memory.stats()))
    wm_middleware.uninstrument()
