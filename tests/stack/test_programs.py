"""The built programs judge the project's config files themselves: the collector lists the
components compiled into it (``components``) and checks the config (``validate``), Jaeger checks
its own; their versions are the ones the compose file pins."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from stack import COLLECTOR, JAEGER, running
from stack.services import COLLECTOR_CONFIG, JAEGER_CONFIG, prometheus_binary

from .conftest import require_stack

require_stack()

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "examples" / "observability" / "docker-compose.yml"
KINDS = ("receivers", "processors", "exporters", "connectors", "extensions")


def _run(binary: Path, *args: str) -> str:
    done = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _used(config: dict[str, Any]) -> dict[str, set[str]]:
    """The component types ``config`` defines, by kind (``otlp_grpc/jaeger`` -> ``otlp_grpc``)."""
    return {kind: {name.split("/", 1)[0] for name in config.get(kind) or {}} for kind in KINDS}


def test_the_collector_has_exactly_the_components_its_config_uses(
    binaries: dict[str, Path],
) -> None:
    listed = yaml.safe_load(_run(binaries[COLLECTOR.name], "components"))
    compiled = {kind: {c["name"] for c in listed.get(kind) or []} for kind in KINDS}
    config = yaml.safe_load(COLLECTOR_CONFIG.read_text(encoding="utf-8"))
    assert compiled == _used(config)
    assert "otlp_grpc" in compiled["exporters"]  # the name the config uses (>= 0.144)


@pytest.mark.parametrize(
    ("program", "config"), [(COLLECTOR, COLLECTOR_CONFIG), (JAEGER, JAEGER_CONFIG)]
)
def test_each_program_validates_the_config_the_compose_file_mounts(
    binaries: dict[str, Path], program: Any, config: Path
) -> None:
    """With no variables set, the defaults (the containers' addresses) are what is checked."""
    _run(binaries[program.name], "validate", "--config", f"file:{config}")


def test_the_programs_are_the_releases_the_compose_file_pins(
    binaries: dict[str, Path],
) -> None:
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    collector_version = _run(binaries[COLLECTOR.name], "--version")
    assert collector_version.split()[-1] == COLLECTOR.release
    assert services["otel-collector"]["image"].endswith(f":{COLLECTOR.release}")
    jaeger_version = yaml.safe_load(_run(binaries[JAEGER.name], "version"))
    assert jaeger_version["gitVersion"] == f"v{JAEGER.release}"
    assert services["jaeger"]["image"] == f"jaegertracing/jaeger:{JAEGER.release}"


def test_prometheus_is_the_release_the_compose_file_pins() -> None:
    """The system's package (Debian's 2.42.0) is the Prometheus the tests ran."""
    first = _run(Path(prometheus_binary()), "--version").splitlines()[0]
    match = re.match(r"prometheus, version (\d+\.\d+\.\d+)", first)
    assert match, first
    services = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))["services"]
    assert services["prometheus"]["image"] == f"prom/prometheus:v{match.group(1)}"


def test_the_stack_stops_every_program_and_removes_its_files(binaries: dict[str, Path]) -> None:
    with running(binaries[COLLECTOR.name], binaries[JAEGER.name]) as stack:
        workdir, ports = stack.workdir, stack.ports
        assert sorted(p.name for p in workdir.glob("*.log")) == [
            "collector.log",
            "jaeger.log",
            "prometheus.log",
        ]
    assert not workdir.exists()
    for port in (ports.otlp_grpc, ports.otlp_http, ports.jaeger, ports.prometheus):
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, port  # nothing listens
