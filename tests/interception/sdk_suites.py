"""Run the installed supermemory SDK's own test suite twice, plain and under ``instrument()``.

    python tests/interception/sdk_suites.py 3.62.0     # or 5.0.1

Downloads the SDK's sdist at that version from the package index (``pip download --no-deps
--no-binary :all:``), extracts it without its ``src/`` and with its pytest settings (less
``-n auto``: the suite runs in one process here), and runs its ``tests/`` against the installed
SDK, which must be that version: once plain, once with ``sdk_suite_plugin`` beside this file
(``instrument()``, the working memory cleared around every test). Every test must end the same
way both times, and the instrumented run must really have gone through the middleware. Prints
both runs' counts and times; exits 1 on any difference. The suites need ``respx`` and
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


def run(suite: Path, instrumented: bool) -> tuple[dict[str, str], float, dict[str, object]]:
    """Each test's outcome (passed | failed | error | skipped), the run's seconds, its stats."""
    report = suite / ("instrumented.xml" if instrumented else "plain.xml")
    stats_file = suite / "stats.json"
    path = os.pathsep.join([str(ROOT), str(PLUGIN_DIR), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    env["WM_SUITE_STATS"] = str(stats_file)
    command = [sys.executable, "-m", "pytest", "tests", "-q", "-p", "no:cacheprovider",
               f"--junitxml={report}", "-o", "junit_family=xunit2"]  # fmt: skip
    if instrumented:
        command += ["-p", PLUGIN]
    start = time.perf_counter()
    subprocess.run(command, cwd=suite, env=env, check=False, capture_output=True)
    seconds = time.perf_counter() - start
    stats: dict[str, object] = {}
    if instrumented and stats_file.exists():
        stats = json.loads(stats_file.read_text())
    return (outcomes(report) if report.exists() else {}), seconds, stats


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
    args = parser.parse_args(argv)
    installed = version("supermemory")
    if installed != args.pinned:
        print(f"supermemory {installed} is installed; the suite pinned is {args.pinned}")
        return 1
    with tempfile.TemporaryDirectory(prefix="sdk-suite-") as scratch:
        suite = prepare(download(args.pinned, Path(scratch)))
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
