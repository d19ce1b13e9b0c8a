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
    """The text of every element with a ``data-key`` attribute, and every resource reference."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str] = {}
        self.references: list[str] = []
        self._open: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        self.references += [v for k, v in found.items() if k in ("src", "href") and v]
        self._open.append(found.get("data-key"))
        if found.get("data-key"):
            self.values[str(found["data-key"])] = ""

    def handle_endtag(self, tag: str) -> None:
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
        "--html", str(path),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"HTML report written to {path}" in result.stderr
    return path, json.loads(result.stdout)


def _check_numbers(html: str, summary: dict[str, Any]) -> dict[str, str]:
    values = _keyed(html).values
    for key in (
        "requests_saved",
        "runs.uncached.upstream_requests",
        "runs.cached.upstream_requests",
        "runs.uncached.search_latency_ms.p50",
        "runs.cached.search_latency_ms.p95",
        "runs.cached.turns.0.upstream_requests",
        "waterfall_turn",
    ):
        assert key in values, f"the page does not show {key}"
    for key, text in values.items():
        assert json.loads(text) == _lookup(summary, key), key
    return values


def test_html_report_numbers_are_the_json_summarys(report: tuple[Path, dict[str, Any]]) -> None:
    path, summary = report
    html = path.read_text(encoding="utf-8")
    values = _check_numbers(html, summary)
    turns = len(summary["runs"]["cached"]["turns"])
    for run_name in ("uncached", "cached"):  # requests per turn, both runs, every turn
        for index in range(turns):
            assert f"runs.{run_name}.turns.{index}.upstream_requests" in values
    for section in ("Per-search latency", "Upstream requests per turn", "Waterfall"):
        assert section in html


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
        "--window-size=1000,1400", f"--screenshot={shot}", path.as_uri(), profile=tmp_path / "p1"
    )
    assert shot.exists(), done.stderr[-2000:]
    width, height, rows = _png_pixels(shot.read_bytes())
    assert (width, height) == (1000, 1400)
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
