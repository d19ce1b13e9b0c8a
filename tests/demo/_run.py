"""Running the console entry point and the examples as a user would: in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def environment(**extra: str) -> dict[str, str]:
    """The current environment with the checkout importable and no real-API or OTLP settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SUPERMEMORY_", "OTEL_EXPORTER_OTLP", "OTLP_"))
    }
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def run(*args: str, timeout: float = 120.0, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=environment(**extra),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


# ``python -m wm_middleware`` with SIGINT handled as in a terminal. A test command run in the
# background (``pytest &``, a CI step) has SIGINT ignored, and a child inherits that: Python
# then never turns SIGINT into KeyboardInterrupt. Restored here, in the child, before the CLI
# runs (a preexec_fn would do it between fork and exec, which is unsafe with threads around).
_MAIN = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'wm-middleware'; runpy.run_module('wm_middleware', run_name='__main__')"
)


def start(*args: str, group: bool = False) -> subprocess.Popen[str]:
    """``python -m wm_middleware *args`` in the background, its output piped, Ctrl-C handled as
    in a terminal; ``group``: in a process group of its own, which ``os.killpg`` signals with
    every process the command started, as a terminal's Ctrl-C does."""
    return subprocess.Popen(
        [sys.executable, "-c", _MAIN, *args],
        cwd=ROOT,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        process_group=0 if group else None,
    )


def in_terminal(
    *args: str, until: str, timeout: float = 120.0
) -> tuple[subprocess.Popen[bytes], int, bytes]:
    """``python -m wm_middleware *args`` with a pseudo-terminal as its stdin, stdout and stderr
    (as in a shell, 100 columns); returns once it has printed ``until``, with the terminal's
    reading end and what was read so far."""
    import pty
    import select
    import time

    reader, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-c", _MAIN, *args],
        cwd=ROOT,
        env=environment(COLUMNS="100", LINES="40", TERM="xterm-256color"),
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
    )
    os.close(terminal)
    seen, deadline = b"", time.monotonic() + timeout
    while until.encode() not in seen and time.monotonic() < deadline:
        if select.select([reader], [], [], 0.5)[0]:
            seen += os.read(reader, 65536)
    assert until.encode() in seen, seen.decode(errors="replace")
    return process, reader, seen


def read_to_the_end(reader: int, timeout: float = 60.0) -> bytes:
    """Everything a pseudo-terminal shows until every process holding it has exited."""
    import select
    import time

    seen, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not select.select([reader], [], [], 0.5)[0]:
            continue
        try:
            chunk = os.read(reader, 65536)
        except OSError:  # EIO: the other end is closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(reader)
    return seen


@contextmanager
def serving(*args: str) -> Iterator[str]:
    """``wm-middleware serve --port 0 *args`` in a subprocess; yields the URL its banner names."""
    process = start("serve", "--port", "0", *args)
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        assert banner.startswith("wm-middleware: emulator on http://"), process.communicate()[1]
        yield banner.split(" on ", 1)[1].split()[0]
    finally:
        process.terminate()
        process.communicate(timeout=10)
