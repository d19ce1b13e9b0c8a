"""``wm-middleware demo --html FILE``: one self-contained page whose numbers are ``--json``'s,
rendered for real in headless Chromium."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import struct
import subprocess
import zlib
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from ._run import run

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("supermemory_openai") is None,
    reason="the demo needs supermemory 3.x and supermemory-openai-sdk",
)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class _Keyed(HTMLParser):
    """The text and ``data-value`` of every element with a ``data-key`` attribute, every
    resource reference, and the elements of each chart (``<svg data-chart=...>``)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}
        self.json: dict[str, str] = {}
        self.references: list[str] = []
        self.charts: list[tuple[str, list[tuple[str, dict[str, str]]]]] = []
        self._open: list[str | None] = []
        self._chart: list[tuple[str, dict[str, str]]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        self.references += [v for k, v in found.items() if k in ("src", "href") and v]
        if tag == "svg":
            self._chart = []
            self.charts.append((found.get("data-chart", ""), self._chart))
        elif self._chart is not None:
            self._chart.append((tag, found))
        if tag in ("line", "rect"):  # void in SVG: no end tag to pop
            return
        self._open.append(found.get("data-key"))
        if found.get("data-key"):
            self.values[found["data-key"]] = ""
            self.json[found["data-key"]] = found.get("data-value", "")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self._chart = None
        if tag in ("line", "rect"):
            return
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for key in self._open:
            if key:
                self.values[key] += data


def _keyed(html: str) -> _Keyed:
    parser = _Keyed()
    parser.feed(html)
    return parser


def _lookup(data: Any, key: str) -> Any:
    for part in key.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("html") / "report.html"
    result = run(
        "-m", "wm_middleware", "demo", "--turns", "3", "--latency-ms", "5", "--json",
        "--indexing-delay", "0", "--html", str(path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"HTML report written to {path}" in result.stderr
    return path, json.loads(result.stdout)


def _check_numbers(html: str, summary: dict[str, Any]) -> dict[str, str]:
    from wm_middleware.demo.html import shown

    keyed = _keyed(html)
    values = keyed.values
    for key in (
        "requests_saved",
        "requests_saved_ratio",
        "wall_ratio",
        "runs.uncached.wall_ms",
        "runs.cached.wall_ms",
        "runs.uncached.upstream_requests",
        "runs.cached.upstream_requests",
        "runs.uncached.search_latency_ms.p50",
        "runs.cached.search_latency_ms.p95",
        # Beside the p50 of all searches: what a hit and a miss cost.
        "runs.cached.search_latency_p50_ms_by_result.hit",
        "runs.cached.search_latency_p50_ms_by_result.miss",
        "runs.uncached.search_latency_p50_ms_by_result.bypass",
        "runs.cached.turns.0.upstream_requests",
        "runs.cached.turns.0.wall_ms",
        "runs.uncached.new_memory.first_seen_turn",
        "runs.cached.new_memory.first_seen_turn",
    ):
        assert key in values, f"the page does not show {key}"
    for key, text in values.items():
        value = json.loads(keyed.json[key])
        assert value == _lookup(summary, key), key  # the --json value
        assert " ".join(text.split()) == shown(key, value), key  # shown as the terminal does
    return values


def test_html_report_numbers_are_the_json_summarys(report: tuple[Path, dict[str, Any]]) -> None:
    path, summary = report
    html = path.read_text(encoding="utf-8")
    values = _check_numbers(html, summary)
    turns = len(summary["runs"]["cached"]["turns"])
    for run_name in ("uncached", "cached"):  # requests per turn, both runs, every turn
        for index in range(turns):
            assert f"runs.{run_name}.turns.{index}.upstream_requests" in values
    for section in (
        "Wall time per turn",
        "Upstream requests per turn",
        "Per-search latency",
        "When each agent first sees the memory written in turn",
        "Waterfall of every cached turn",
    ):
        assert section in html
    # Every turn's waterfall, not one chosen turn.
    assert [chart for chart, _ in _keyed(html).charts].count("waterfall") == turns
    for index in range(1, turns + 1):
        assert f"<h3>Turn {index} (" in html


def test_html_report_shows_numbers_as_the_terminal_does(
    report: tuple[Path, dict[str, Any]],
) -> None:
    values = _keyed(report[0].read_text(encoding="utf-8")).values
    assert re.fullmatch(r"\d{1,3}%", values["requests_saved_ratio"])  # 56%, not 0.5588
    assert re.fullmatch(r"\d+\.\d\dx", values["wall_ratio"])
    for key, text in values.items():
        if key.endswith("wall_ms"):
            assert re.fullmatch(r"\d+ ms", text), (key, text)  # whole ms, as the table
        elif ".search_latency_" in key:  # one decimal, two below 1 ms: never 182.931
            assert re.fullmatch(r"\d+\.\d ms|0\.\d\d ms", text), (key, text)


def test_the_report_formats_numbers_with_consistent_decimals() -> None:
    from wm_middleware.demo.html import shown
    from wm_middleware.demo.report import milliseconds, percent, ratio

    assert milliseconds(105.74) == "105.7 ms"
    assert milliseconds(182.931) == "182.9 ms"
    assert milliseconds(0.0123) == "0.01 ms"
    assert milliseconds(4.0) == "4.0 ms"
    assert percent(0.5588) == "56%"
    assert ratio(2502.0, 1213.0) == "0.48x"
    assert ratio(100.0, 0.5) == "<0.01x"
    assert shown("requests_saved_ratio", 0.5588) == "56%"
    assert shown("wall_ratio", 0.4848) == "0.48x"
    assert shown("runs.cached.wall_ms", 1213.4) == "1213 ms"
    assert shown("runs.cached.search_latency_ms.p50", 0.0123) == "0.01 ms"
    assert shown("runs.cached.new_memory.first_seen_turn", None) == "not seen"
    assert shown("runs.cached.new_memory.first_seen_turn", 4) == "turn 4"


def _attributes(chart: list[tuple[str, dict[str, str]]], tag: str, marker: str) -> list[Any]:
    return [attrs for kind, attrs in chart if kind == tag and marker in attrs]


def test_latency_chart_axis_starts_below_every_call_and_labels_never_collide(
    report: tuple[Path, dict[str, Any]],
) -> None:
    [latency] = [c for name, c in _keyed(report[0].read_text()).charts if name == "latency"]
    ticks = sorted(float(a["x"]) for a in _attributes(latency, "text", "data-tick"))
    calls = [float(a["x1"]) for a in _attributes(latency, "line", "data-call")]
    assert ticks[0] <= min(calls), "a call left of the first axis label"
    assert ticks[-1] >= max(calls), "a call right of the last axis label"
    for lane in ("uncached", "cached"):
        labels = {
            a["data-quantile"]: a for a in _attributes(latency, "text", "data-quantile")
            if a["data-lane"] == lane
        }  # fmt: skip
        # p50 reads leftwards from its mark, p95 rightwards from its own, further right.
        assert labels["p50"]["text-anchor"] == "end"
        assert labels["p95"]["text-anchor"] == "start"
        assert float(labels["p50"]["x"]) < float(labels["p95"]["x"])


@pytest.mark.parametrize("name", ["wall-per-turn", "requests-per-turn"])
def test_bar_charts_use_their_axes(report: tuple[Path, dict[str, Any]], name: str) -> None:
    [chart] = [c for found, c in _keyed(report[0].read_text()).charts if found == name]
    bars = [a for kind, a in chart if kind == "rect"]
    from wm_middleware.demo.html import WIDTH

    left = min(float(b["x"]) for b in bars)
    right = max(float(b["x"]) + float(b["width"]) for b in bars)
    assert right - left >= 0.8 * WIDTH, "the bars fill under 80% of the axis' width"
    tallest = max(float(b["height"]) for b in bars)
    assert tallest >= 0.6 * 200, "the tallest bar fills under 60% of the axis' height"


def test_html_report_is_self_contained(report: tuple[Path, dict[str, Any]]) -> None:
    html = report[0].read_text(encoding="utf-8")
    assert _keyed(html).references == []
    assert not re.search(r"url\(|@import|<script|<link|<img|<iframe", html, re.IGNORECASE)
    assert "<svg" in html


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB rows (alpha dropped) of an 8-bit PNG, as Chromium writes it."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, chunks, header = 8, b"", b""
    while position < len(data):
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind = data[position + 4 : position + 8]
        body = data[position + 8 : position + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks += body
        position += 12 + length
    width, height, depth, color = struct.unpack(">IIBB", header[:10])
    assert depth == 8, "8-bit channels expected"
    assert color in (2, 6), "RGB or RGBA expected"
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(chunks)
    stride = width * channels
    rows: list[bytes] = []
    previous = bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                best = left if pa <= pb and pa <= pc else up if pb <= pc else corner
                line[i] = (line[i] + best) & 0xFF
        rows.append(b"".join(bytes(line[j : j + 3]) for j in range(0, stride, channels)))
        previous = line
    return width, height, rows


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", f"--user-data-dir={profile}", *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip


@pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium (CI installs Debian's: apt-get install chromium)"
)
def test_html_report_renders_in_headless_chromium_with_the_json_numbers(
    report: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, summary = report
    shot = tmp_path / "report.png"
    done = _chromium(
        "--window-size=1000,2400", f"--screenshot={shot}", path.as_uri(), profile=tmp_path / "p1"
    )
    assert shot.exists(), done.stderr[-2000:]
    width, height, rows = _png_pixels(shot.read_bytes())
    assert (width, height) == (1000, 2400)
    pixels = [row[i : i + 3] for row in rows[::4] for i in range(0, len(row), 12)]
    background = max(set(pixels), key=pixels.count)
    drawn = sum(1 for p in pixels if p != background) / len(pixels)
    assert drawn > 0.03, f"the screenshot is nearly blank ({drawn:.1%} drawn)"
    # The page's colours are there: the runs' bars and the waterfall's results.
    colours = set(pixels)
    for css in ("b04fc4", "2a9d57", "d9a21b"):
        assert bytes.fromhex(css) in colours, f"#{css} was not painted"
    # What Chromium rendered says what --json said.
    dom = _chromium("--dump-dom", path.as_uri(), profile=tmp_path / "p2")
    assert dom.returncode == 0, dom.stderr[-2000:]
    _check_numbers(dom.stdout, summary)
