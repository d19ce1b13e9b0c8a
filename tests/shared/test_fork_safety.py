"""Fork safety: connections and the subscriber belong to the process that uses them."""

from __future__ import annotations

import json
import os
import time

from .conftest import patient_tier


def test_connections_are_made_in_the_process_that_uses_them(redis_url: str) -> None:
    tier = patient_tier(redis_url)
    tier.load("q", (), 60.0, lambda: "v")
    parent_id = tier._process.sync_conns().main.client_id()  # type: ignore[union-attr]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a forked gunicorn/Celery worker
        try:
            result = tier.load("q", (), 60.0, lambda: "child fetched")
            child_id = tier._process.sync_conns().main.client_id()  # type: ignore[union-attr]
            deadline = time.monotonic() + 20  # a bound, not a measurement
            while not tier.subscribed and time.monotonic() < deadline:
                time.sleep(0.01)
            report = json.dumps([result.value, result.outcome, child_id, tier.subscribed])
            os.write(write, report.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        value, outcome, child_id, subscribed = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert (value, outcome) == ("v", "shared_hit")
    assert child_id != parent_id
    assert subscribed is True
    assert tier.load("q", (), 60.0, str).outcome == "shared_hit"  # the parent is unharmed
