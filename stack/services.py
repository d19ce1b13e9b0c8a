"""The collector, Jaeger and Prometheus on loopback, each with the project's own config file.

The files are the ones ``examples/observability/docker-compose.yml`` mounts. The collector's and
Jaeger's say every address as ``${env:VAR:-default}``: the defaults are the containers' addresses,
and :func:`running` sets the variables to loopback ports. Prometheus 2.42 expands no variables in
its config file, so its file is rendered with the collector's address put in for
``otel-collector:8889``. Each program is ready when its health endpoint says so; when the block
ends every process is stopped and the working directory (configs, logs, Prometheus's data) is
removed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COLLECTOR_CONFIG = REPO / "otel-collector.yaml"
JAEGER_CONFIG = REPO / "examples" / "observability" / "jaeger" / "config.yaml"
PROMETHEUS_CONFIG = REPO / "examples" / "observability" / "prometheus.yml"
# The collector's exporter as the compose file's Prometheus scrapes it.
SCRAPED_COLLECTOR = "otel-collector:8889"
SCRAPE_TARGET = f'targets: ["{SCRAPED_COLLECTOR}"]'
LOOPBACK = "127.0.0.1"
# Bounds a passing start never reaches (a cold start on a loaded two-core machine takes seconds).
READY_LIMIT = 180.0
STOP_LIMIT = 20.0


class StackError(RuntimeError):
    """A program of the stack exited or did not become ready; the message ends with its log."""


@dataclass(frozen=True)
class Ports:
    """Every port the stack listens on (all on loopback).

    The first four are the ones a user talks to; the rest connect the programs to each other or
    serve their own health and metrics, each its own so that nothing collides (Jaeger's and the
    collector's self-metrics both default to 8888).
    """

    otlp_grpc: int
    otlp_http: int
    jaeger: int
    prometheus: int
    collector_exporter: int
    collector_health: int
    collector_metrics: int
    jaeger_otlp_grpc: int
    jaeger_otlp_http: int
    jaeger_query_grpc: int
    jaeger_health: int
    jaeger_metrics: int

    @classmethod
    def choose(cls, **fixed: int) -> Ports:
        """``fixed`` ports as given, each other one free on loopback (all held open until every
        one is chosen, so none is chosen twice)."""
        with contextlib.ExitStack() as held:
            chosen: dict[str, int] = {}
            for field in fields(cls):
                if field.name in fixed:
                    chosen[field.name] = fixed[field.name]
                    continue
                probe = held.enter_context(socket.socket())
                probe.bind((LOOPBACK, 0))
                chosen[field.name] = int(probe.getsockname()[1])
        return cls(**chosen)


def _address(port: int) -> str:
    return f"{LOOPBACK}:{port}"


def collector_env(ports: Ports, flush_interval: str | None = None) -> dict[str, str]:
    """The variables of ``otel-collector.yaml`` for ``ports``."""
    env = {
        "WM_COLLECTOR_OTLP_GRPC": _address(ports.otlp_grpc),
        "WM_COLLECTOR_OTLP_HTTP": _address(ports.otlp_http),
        "WM_COLLECTOR_JAEGER": _address(ports.jaeger_otlp_grpc),
        "WM_COLLECTOR_PROMETHEUS": _address(ports.collector_exporter),
        "WM_COLLECTOR_HEALTH": _address(ports.collector_health),
        "WM_COLLECTOR_METRICS_HOST": LOOPBACK,
        "WM_COLLECTOR_METRICS_PORT": str(ports.collector_metrics),
    }
    if flush_interval is not None:
        env["WM_SPANMETRICS_FLUSH_INTERVAL"] = flush_interval
    return env


def jaeger_env(ports: Ports) -> dict[str, str]:
    """The variables of ``examples/observability/jaeger/config.yaml`` for ``ports``."""
    return {
        "WM_JAEGER_OTLP_GRPC": _address(ports.jaeger_otlp_grpc),
        "WM_JAEGER_OTLP_HTTP": _address(ports.jaeger_otlp_http),
        "WM_JAEGER_QUERY_HTTP": _address(ports.jaeger),
        "WM_JAEGER_QUERY_GRPC": _address(ports.jaeger_query_grpc),
        "WM_JAEGER_HEALTH": _address(ports.jaeger_health),
        "WM_JAEGER_METRICS_HOST": LOOPBACK,
        "WM_JAEGER_METRICS_PORT": str(ports.jaeger_metrics),
        "WM_JAEGER_PROMETHEUS": f"http://{_address(ports.prometheus)}",
    }


def prometheus_config(ports: Ports) -> str:
    """``examples/observability/prometheus.yml`` scraping the collector at its loopback port."""
    text = PROMETHEUS_CONFIG.read_text(encoding="utf-8")
    if text.count(SCRAPE_TARGET) != 1:
        raise StackError(f"{PROMETHEUS_CONFIG} should say {SCRAPE_TARGET} once")
    target = SCRAPE_TARGET.replace(SCRAPED_COLLECTOR, _address(ports.collector_exporter))
    return text.replace(SCRAPE_TARGET, target)


@dataclass(frozen=True)
class Stack:
    """A running stack: where to send OTLP and where to read traces and metrics."""

    ports: Ports
    workdir: Path

    @property
    def otlp_http(self) -> str:
        return f"http://{_address(self.ports.otlp_http)}"

    @property
    def otlp_grpc(self) -> str:
        return f"http://{_address(self.ports.otlp_grpc)}"

    @property
    def jaeger(self) -> str:
        return f"http://{_address(self.ports.jaeger)}"

    @property
    def prometheus(self) -> str:
        return f"http://{_address(self.ports.prometheus)}"

    @property
    def collector_metrics(self) -> str:
        """The collector's ``prometheus`` exporter, as Prometheus scrapes it."""
        return f"http://{_address(self.ports.collector_exporter)}/metrics"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def log_tail(log: Path, chars: int = 4000) -> str:
    """The last ``chars`` characters of ``log``, for an error message."""
    return log.read_text(encoding="utf-8", errors="replace")[-chars:]


@contextlib.contextmanager
def _process(
    name: str, argv: list[str], workdir: Path, health: str, env: Mapping[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` running with its output in ``workdir/<name>.log``, once ``health`` answers 200;
    stopped (terminated, killed if it does not stop in time) when the block ends."""
    log = workdir / f"{name}.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            argv, cwd=workdir, env={**os.environ, **env}, stdout=output, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + READY_LIMIT
            while not _healthy(health):
                if process.poll() is not None:
                    raise StackError(f"{name} exited ({process.returncode}):\n{log_tail(log)}")
                if time.monotonic() > deadline:
                    raise StackError(f"{name} not ready at {health}:\n{log_tail(log)}")
                time.sleep(0.2)
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=STOP_LIMIT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=STOP_LIMIT)


def prometheus_binary() -> str:
    """The ``prometheus`` command (Debian's package: ``apt-get install prometheus``).

    Raises:
        FileNotFoundError: it is not on PATH.
    """
    found = shutil.which("prometheus")
    if found is None:
        raise FileNotFoundError("no `prometheus` on PATH (Debian: apt-get install prometheus)")
    return found


@contextlib.contextmanager
def running(
    collector: Path,
    jaeger: Path,
    ports: Ports | None = None,
    *,
    flush_interval: str | None = None,
    keep: bool = False,
) -> Iterator[Stack]:
    """Prometheus, Jaeger (reading span metrics from it) and the collector (sending traces to
    Jaeger, serving metrics to Prometheus), started in that order from the binaries
    ``collector`` and ``jaeger`` on ``ports`` (default: all free), each ready before the next.

    ``flush_interval`` overrides the ``spanmetrics`` connector's (a Go duration such as ``1s``);
    ``keep`` leaves the working directory in place, for its logs.
    """
    ports = ports or Ports.choose()
    workdir = Path(tempfile.mkdtemp(prefix="wm-stack-"))
    try:
        config = workdir / "prometheus.yml"
        config.write_text(prometheus_config(ports), encoding="utf-8")
        stack = Stack(ports, workdir)
        prometheus = [
            prometheus_binary(),
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address={_address(ports.prometheus)}",
            "--enable-feature=exemplar-storage",
        ]
        with (
            _process("prometheus", prometheus, workdir, f"{stack.prometheus}/-/ready", {}),
            _process(
                "jaeger",
                [str(jaeger), "--config", f"file:{JAEGER_CONFIG}"],
                workdir,
                f"http://{_address(ports.jaeger_health)}/status",
                jaeger_env(ports),
            ),
            _process(
                "collector",
                [str(collector), "--config", f"file:{COLLECTOR_CONFIG}"],
                workdir,
                f"http://{_address(ports.collector_health)}/",
                collector_env(ports, flush_interval),
            ),
        ):
            yield stack
    finally:
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
