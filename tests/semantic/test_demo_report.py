"""``wm-middleware demo --semantic shadow`` ends with the shadow run's line for the cached run,
and its HTML report shows the same numbers."""

from __future__ import annotations

import importlib.util
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from ..demo._run import run

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("supermemory_openai") is None,
    reason="the demo needs supermemory 3.x and supermemory-openai-sdk",
)

LINE = re.compile(
    r"near-duplicates, cached run: of (\d+) misses, (\d+) had a candidate: (\d+) agreed, "
    r"(\d+) disagreed \(disagreement <= ([\d.]+)% at 95%\).*"
)


class _Near(HTMLParser):
    """The ``near.*`` numbers of a page: data-key -> (JSON value, text shown)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, tuple[object, str]] = {}
        self._open: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        key = found.get("data-key") or ""
        if key.startswith("near."):
            self._open = key
            self.values[key] = (json.loads(found["data-value"] or "null"), "")

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            value, text = self.values[self._open]
            self.values[self._open] = (value, text + data)

    def handle_endtag(self, tag: str) -> None:
        self._open = None


def test_the_demo_prints_what_serving_near_duplicates_would_have_saved_and_risked(
    tmp_path: Path,
) -> None:
    page = tmp_path / "report.html"
    done = run(
        "-m", "wm_middleware", "demo", "--semantic", "shadow", "--latency-ms", "0",
        "--indexing-delay", "0", "--html", str(page), timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("near-duplicates")]
    assert len(lines) == 1, done.stdout
    found = LINE.fullmatch(lines[0])
    assert found is not None, lines[0]
    misses, candidates, agreed, disagreed = map(int, found.groups()[:4])
    assert misses > 0
    assert candidates == agreed + disagreed
    near = _Near()
    near.feed(page.read_text(encoding="utf-8"))
    shown = {key: value for key, (value, _) in near.values.items()}
    assert {k: shown[f"near.{k}"] for k in ("misses", "candidates", "agreed", "disagreed")} == {
        "misses": misses,
        "candidates": candidates,
        "agreed": agreed,
        "disagreed": disagreed,
    }
    assert near.values["near.bound"][1] == f"{found.group(5)}%"  # shown as the line shows it
    assert "Near-duplicates (shadow mode)" in page.read_text(encoding="utf-8")


def test_without_the_shadow_mode_the_summary_and_page_have_no_near_duplicates(
    tmp_path: Path,
) -> None:
    page = tmp_path / "report.html"
    done = run(
        "-m", "wm_middleware", "demo", "--turns", "1", "--latency-ms", "0", "--indexing-delay",
        "0", "--json", "--html", str(page), timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["near"] is None
    assert "Near-duplicates" not in page.read_text(encoding="utf-8")


def test_the_demo_in_serve_mode_prints_the_near_hits_served_and_verified(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    done = run(
        "-m", "wm_middleware", "demo", "--semantic", "serve", "--turns", "2", "--latency-ms",
        "0", "--indexing-delay", "0", "--html", str(page), timeout=180,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any(LINE.fullmatch(line) for line in lines), done.stdout
    served = [line for line in lines if line.startswith("near hits, cached run:")]
    assert served == [
        "near hits, cached run: 0 served (0 verified by a fetch), under a disagreement bound of "
        "at most 0.00% at 95%"
    ]
    near = _Near()
    near.feed(page.read_text(encoding="utf-8"))
    assert (near.values["near.served"][0], near.values["near.verified"][0]) == (0, 0)
    assert "Near-duplicates (serve mode)" in page.read_text(encoding="utf-8")
