"""A server the tests run as a subprocess (``prometheus``, Phoenix): its output goes to a log
file, and it is stopped for sure when the block ends, killed if it does not stop in time."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def server_process(
    argv: list[str],
    log: Path,
    *,
    env: Mapping[str, str] | None = None,
    stop_timeout: float = 10.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` running, stdout and stderr in ``log``; terminated when the block ends."""
    with log.open("wb") as output:
        process = subprocess.Popen(argv, env=env, stdout=output, stderr=subprocess.STDOUT)
        try:
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=stop_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=stop_timeout)


def log_tail(log: Path, chars: int = 4000) -> str:
    """The last ``chars`` characters of ``log``, for a failure message."""
    return log.read_text(encoding="utf-8", errors="replace")[-chars:]
