"""An application process with ``instrument(shared=url)`` for the fleet tests (importable: spawn).

Serves ``search`` (does the answer mention a word?), ``add`` (a fact) and ``quit`` from a queue, so
a test can interleave what the processes do. Replies carry the working memory's statistics.
"""

from __future__ import annotations

import time
from typing import Any

from tests.freshness.conftest import Sdk, mentions


def serve(redis_url: str, base_url: str, major: str, requests: Any, replies: Any) -> None:
    import wm_middleware
    from tests.shared.tiers import patient_url_tiers

    patient_url_tiers()  # the subject is what the fleet settles, not the tier's timeout
    # Copies live 1.5 s: a round of queued asks on a loaded machine stays well within one.
    memory = wm_middleware.instrument(shared=redis_url, settle_interval=2.0)
    deadline = time.monotonic() + 30  # a bound, not a measurement
    while not memory.shared.subscribed and time.monotonic() < deadline:  # type: ignore[union-attr]
        time.sleep(0.005)
    sdk = Sdk(major)
    client = sdk.client("sync", base_url)
    replies.put(("ready", None, memory.stats()))
    while True:
        command, argument = requests.get()
        if command == "quit":
            break
        try:
            if command == "search":
                value: Any = mentions(sdk.search(client), argument)
            elif command == "add":
                value = str(sdk.add(client, argument))
            else:
                value = None
        except Exception as error:  # the test sees it as the reply
            value = repr(error)
        replies.put((command, value, memory.stats()))
    wm_middleware.uninstrument()
