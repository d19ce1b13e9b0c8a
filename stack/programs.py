"""The two Go programs of the stack, built from this directory's modules and cached.

Each program is a Go module of the project's own (``jaeger/``, ``collector/``): its ``go.mod``
and ``go.sum`` pin every module version. A build is keyed by the hash of those files, the
module's Go sources and the Go toolchain's version, and kept under :func:`cache_dir`; a second
run with the same key takes the binary from there at once. Go itself keeps the downloaded
modules (``GOMODCACHE``) and the compiled packages (``GOCACHE``) in its default places, so a
changed pin rebuilds only what changed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Where a machine without ``go`` on PATH may still have it (the project's machines and CI).
GO_FALLBACK = Path("/usr/local/go/bin/go")


class GoNotFound(RuntimeError):
    """No Go toolchain: the stack's programs cannot be built."""


@dataclass(frozen=True)
class Program:
    """A program built from the Go module in ``HERE / module``.

    ``package`` is the import path ``go build`` builds (``.`` for the module's own ``main``);
    ``release`` is the upstream release this build is, as its container image is tagged;
    ``ldflags`` are passed to the linker (the version stamp upstream's own build sets).
    """

    name: str
    module: str
    package: str
    release: str
    ldflags: str = ""

    @property
    def directory(self) -> Path:
        return HERE / self.module


# Module github.com/jaegertracing/jaeger v1.75.0 is the commit tagged v2.12.0
# (jaegertracing/jaeger:2.12.0).
JAEGER_RELEASE = "2.12.0"
JAEGER = Program(
    "jaeger",
    "jaeger",
    "github.com/jaegertracing/jaeger/cmd/jaeger",
    JAEGER_RELEASE,
    # What `jaeger version` prints, as Jaeger's release build stamps it.
    f"-X github.com/jaegertracing/jaeger/internal/version.latestVersion=v{JAEGER_RELEASE}",
)
# Core v0.165.0 / v1.71.0 with contrib v0.165.1: otel/opentelemetry-collector-contrib:0.165.1.
COLLECTOR = Program("otelcol-wm", "collector", ".", "0.165.1")
PROGRAMS = (COLLECTOR, JAEGER)


def go() -> str:
    """The ``go`` command: on PATH, else :data:`GO_FALLBACK`.

    Raises:
        GoNotFound: neither is there.
    """
    found = shutil.which("go") or (str(GO_FALLBACK) if GO_FALLBACK.is_file() else None)
    if found is None:
        raise GoNotFound(
            "no Go toolchain (`go` is not on PATH): building the collector and Jaeger needs "
            "Go 1.26 (https://go.dev/doc/install)"
        )
    return found


def cache_dir() -> Path:
    """``$WM_STACK_CACHE``, else ``$XDG_CACHE_HOME/wm-middleware/stack`` (``~/.cache``)."""
    explicit = os.environ.get("WM_STACK_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "wm-middleware" / "stack"


def build_key(program: Program, toolchain: str) -> str:
    """A hash of what decides the binary: the module's pins, its Go sources, the toolchain."""
    digest = hashlib.sha256(f"{toolchain}\0{program.ldflags}".encode())
    directory = program.directory
    for path in sorted([directory / "go.mod", directory / "go.sum", *directory.glob("*.go")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Built:
    """A program's binary, and how long this call took to get it (0 from the cache)."""

    program: Program
    path: Path
    seconds: float
    cached: bool


def build(program: Program, *, log: Path | None = None) -> Built:
    """The binary of ``program``: from the cache when its key is there, else built with
    ``CGO_ENABLED=0`` (a static binary) and stored under the key.

    Raises:
        GoNotFound: no Go toolchain.
        subprocess.CalledProcessError: the build failed (its output is in ``log``, or on
            stderr without one).
    """
    command = go()
    toolchain = subprocess.run(
        [command, "version"], check=True, capture_output=True, text=True
    ).stdout.strip()
    target = cache_dir() / f"{program.name}-{build_key(program, toolchain)}" / program.name
    if target.is_file():
        return Built(program, target, 0.0, cached=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    # Built beside the target, then renamed: a concurrent build or an interrupted one never
    # leaves a half-written binary under the key.
    with tempfile.TemporaryDirectory(dir=target.parent) as work:
        partial = Path(work) / program.name
        flags = ["-ldflags", program.ldflags] if program.ldflags else []
        argv = [command, "build", "-trimpath", *flags, "-o", str(partial), program.package]
        env = {**os.environ, "CGO_ENABLED": "0"}
        if log is None:
            subprocess.run(argv, cwd=program.directory, env=env, check=True)
        else:
            with log.open("ab") as output:
                subprocess.run(
                    argv, cwd=program.directory, env=env, check=True, stdout=output, stderr=output
                )
        partial.replace(target)
    return Built(program, target, time.monotonic() - started, cached=False)


def build_all(*, log: Path | None = None) -> dict[str, Built]:
    """Both programs (see :func:`build`), by name."""
    return {program.name: build(program, log=log) for program in PROGRAMS}
