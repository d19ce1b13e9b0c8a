"""Run the installed supermemory SDK's own test suite twice, plain and under ``instrument()``.

    python tests/interception/sdk_suites.py 3.62.0     # or 5.0.1
    python tests/interception/sdk_suites.py 3.62.0 --parallel   # both runs at once

Downloads the SDK's sdist at that version from the package index (``pip download --no-deps
--no-binary :all:``), extracts it without its ``src/`` and with its pytest settings (less
``-n auto``: the suite runs in one process here), and runs its ``tests/`` against the installed
SDK, which must be that version: once plain, once with ``sdk_suite_plugin`` beside this file
(``instrument()``, the working memory cleared around every test). Every test must end the same
way both times, and the instrumented run must really have gone through the middleware. Prints
both runs' counts and times; exits 1 on any difference. ``--parallel`` (the nox sessions) runs
the two at once, each in a process of its own: the outcomes are the same, the times are those of
two runs sharing the machine. The suites need ``respx`` and
``dirty-equals`` (3.x).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import xml.etree.ElementTree as ElementTree
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Imported by its own name: the suite's ``tests`` package would shadow the project's.
PLUGIN = "sdk_suite_plugin"
PLUGIN_DIR = Path(__file__).resolve().parent


def download(pinned: str, into: Path) -> Path:
    """The extracted sdist of ``supermemory==pinned``."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
         f"supermemory=={pinned}", "-d", str(into)],
        check=True,
    )  # fmt: skip
    (archive,) = into.glob(f"supermemory-{pinned}.tar.gz")
    with tarfile.open(archive) as sdist:
        sdist.extractall(into, filter="data")
    return into / f"supermemory-{pinned}"


def prepare(sdist: Path) -> Path:
    """The sdist as the suite's root: its ``src`` removed (the installed SDK is under test), its
    pytest settings in a ``pytest.ini`` (which pytest reads before ``pyproject.toml``)."""
    shutil.rmtree(sdist / "src")
    settings = tomllib.loads((sdist / "pyproject.toml").read_text())
    options = settings.get("tool", {}).get("pytest", {}).get("ini_options", {})
    lines = ["[pytest]"]
    for name, value in options.items():
        if name == "addopts":
            value = value.replace("-n auto", "").strip()
        if name == "testpaths":
            continue
        if isinstance(value, list):
            lines.append(f"{name} =")
            lines.extend(f"    {item}" for item in value)
        else:
            lines.append(f"{name} = {str(value).lower() if isinstance(value, bool) else value}")
    (sdist / "pytest.ini").write_text("\n".join(lines) + "\n")
    return sdist


class Run:
    """One run of the suite, plain or ``instrumented``, in a pytest process of its own."""

    def __init__(self, suite: Path, instrumented: bool) -> None:
        self.report = suite / ("instrumented.xml" if instrumented else "plain.xml")
        self.stats_file = suite / "stats.json"
        self.instrumented = instrumented
        path = os.pathsep.join([str(ROOT), str(PLUGIN_DIR), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, "PYTHONPATH": path, "WM_SUITE_STATS": str(self.stats_file)}
        command = [sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider",
                   f"--junitxml={self.report}", "-o", "junit_family=xunit2"]  # fmt: skip
        if instrumented:
            command += ["-p", PLUGIN]
        self._start = time.perf_counter()
        self._process = subprocess.Popen(
            command, cwd=suite, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def result(self) -> tuple[dict[str, str], float, dict[str, object]]:
        """Each test's outcome (passed | failed | error | skipped), the run's seconds, its stats
        (the instrumented run's), once the run has ended."""
        self._process.wait()
        seconds = time.perf_counter() - self._start
        stats: dict[str, object] = {}
        if self.instrumented and self.stats_file.exists():
            stats = json.loads(self.stats_file.read_text())
        return (outcomes(self.report) if self.report.exists() else {}), seconds, stats


def run(suite: Path, instrumented: bool) -> tuple[dict[str, str], float, dict[str, object]]:
    """One run of the suite to its end: see :meth:`Run.result`."""
    return Run(suite, instrumented).result()


def outcomes(report: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        found[name] = {"failure": "failed", "error": "error", "skipped": "skipped"}.get(
            kinds[0] if kinds else "", "passed"
        )
    return found


def tally(results: dict[str, str]) -> str:
    counts: dict[str, int] = {}
    for result in results.values():
        counts[result] = counts.get(result, 0) + 1
    return ", ".join(f"{count} {kind}" for kind, count in sorted(counts.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pinned", help="the supermemory version whose suite to run (installed)")
    parser.add_argument(
        "--parallel", action="store_true", help="run the plain and instrumented runs at once"
    )
    args = parser.parse_args(argv)
    installed = version("supermemory")
    if installed != args.pinned:
        print(f"supermemory {installed} is installed; the suite pinned is {args.pinned}")
        return 1
    with tempfile.TemporaryDirectory(prefix="sdk-suite-") as scratch:
        suite = prepare(download(args.pinned, Path(scratch)))
        if args.parallel:
            runs = Run(suite, instrumented=False), Run(suite, instrumented=True)
            (plain, plain_s, _), (cached, cached_s, stats) = (r.result() for r in runs)
        else:
            plain, plain_s, _ = run(suite, instrumented=False)
            cached, cached_s, stats = run(suite, instrumented=True)
    print(f"supermemory {args.pinned} suite, plain:        {tally(plain)} in {plain_s:.1f} s")
    print(f"supermemory {args.pinned} suite, instrument(): {tally(cached)} in {cached_s:.1f} s")
    print(f"working memory over the instrumented run: {stats}")
    differ = sorted(
        (name, plain.get(name), cached.get(name))
        for name in plain.keys() | cached.keys()
        if plain.get(name) != cached.get(name)
    )
    for name, before, after in differ:
        print(f"DIFFERS {name}: plain {before}, instrumented {after}")
    if not plain or "passed" not in plain.values():
        print("the plain run passed nothing: the suite did not run")
        return 1
    if not stats.get("instrumented"):
        print("the instrumented run did not load the plugin")
        return 1
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
