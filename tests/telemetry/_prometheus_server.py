"""A real ``prometheus`` on loopback scraping test exporters, and every query of the Grafana
dashboard (``examples/observability``) run against it until each returns data.

The binary is Debian's ``prometheus`` package; a test that needs it skips without it.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..conftest import free_port
from ._server_process import log_tail, server_process

DASHBOARD = (
    Path(__file__).resolve().parents[2]
    / "examples"
    / "observability"
    / "grafana"
    / "dashboards"
    / "wm-cached-vs-uncached.json"
)
# Values for the Grafana template variables the dashboard's queries use.
GRAFANA_VARIABLES = {
    "$__rate_interval": "30s",
    "$__range": "5m",
    "$__interval": "5s",
    "$job": ".*",
    "$operation": ".*",
}


def load_dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """``(panel title, PromQL)`` of every panel target."""
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if target.get("expr")
    ]


def variable_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """`label_values(selector, label)` of each variable, as a PromQL selector."""
    queries = []
    for variable in dashboard["templating"]["list"]:
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", text.strip())
        assert match, f"variable {variable['name']}: unexpected query {text!r}"
        queries.append((f"variable {variable['name']}", match.group(1)))
    return queries


def substitute(expr: str) -> str:
    """Replace Grafana template variables with concrete values."""
    for name, value in sorted(GRAFANA_VARIABLES.items(), key=lambda kv: -len(kv[0])):
        expr = expr.replace(name, value)
    assert "$" not in expr, f"unsubstituted variable in {expr!r}"
    return expr


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as response:
        data = json.load(response)
    assert isinstance(data, dict)
    return data


def _has_finite_sample(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(series["value"][1])) for series in result)


def scrape_job(job: str, port: int, **options: Any) -> dict[str, Any]:
    """A scrape config: ``job`` from 127.0.0.1:``port`` every second."""
    return {
        "job_name": job,
        "scrape_interval": "1s",
        "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
        **options,
    }


@dataclass
class Prometheus:
    base: str
    process: subprocess.Popen[bytes]
    log: Path

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The result of an instant query."""
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        data = _get_json(url)
        assert data["status"] == "success", data
        result: list[dict[str, Any]] = data["data"]["result"]
        return result

    def jobs(self, expr: str) -> set[str]:
        """The ``job`` label of every series ``expr`` returns."""
        return {series["metric"]["job"] for series in self.query(expr)}

    def wait_for_dashboard_data(self, limit: float = 120.0) -> None:
        """Return once every panel and variable query of the dashboard has a finite sample; fail
        after ``limit`` seconds (a bound a passing run never reaches), naming those without."""
        dashboard = load_dashboard()
        queries = panel_queries(dashboard) + variable_queries(dashboard)
        pending = dict.fromkeys(queries, "not run")
        deadline = time.monotonic() + limit
        while pending and time.monotonic() < deadline:
            assert self.process.poll() is None, "prometheus exited:\n" + log_tail(self.log)
            for title, expr in list(pending):
                try:
                    result = self.query(substitute(expr))
                except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
                    pending[(title, expr)] = f"prometheus not answering: {error}"
                    continue
                if result and _has_finite_sample(result):
                    del pending[(title, expr)]
                else:
                    pending[(title, expr)] = f"result {result}"
            if pending:
                time.sleep(1)
        assert not pending, "queries without data:\n" + "\n".join(
            f"- {title}: {expr}\n  {why}" for (title, expr), why in pending.items()
        )


@contextmanager
def prometheus(
    tmp_path: Path, scrape_configs: list[dict[str, Any]], *flags: str
) -> Iterator[Prometheus]:
    """A real ``prometheus`` on a free loopback port scraping ``scrape_configs`` (see
    :func:`scrape_job`), its data and log in ``tmp_path``; skips the test without the binary."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("no `prometheus` binary (CI installs it: apt-get install -y prometheus)")
    yaml = pytest.importorskip("yaml")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": scrape_configs,
    }
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config), encoding="utf-8")
    port = free_port()
    argv = [
        binary,
        f"--config.file={config_file}",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
        *flags,
    ]
    log = tmp_path / "prometheus.log"
    with server_process(argv, log) as process:
        yield Prometheus(f"http://127.0.0.1:{port}", process, log)
