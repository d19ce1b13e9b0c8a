"""``wm-middleware demo --html FILE``: the demo's result as one self-contained HTML page.

For people without Jaeger or Grafana at hand: per-search latency distributions of the uncached
and cached runs, upstream requests (and requests saved) per turn, and the waterfall of one cached
turn. Charts are inline SVG drawn here; there is no script, stylesheet, font or image to fetch.

Every number on the page comes from :func:`~wm_middleware.demo.report.summary` (what ``--json``
prints) and carries its path there in a ``data-key`` attribute (``runs.cached.upstream_requests``),
so a test can check that the page says what ``--json`` says.
"""

from __future__ import annotations

import json
import math
from html import escape
from pathlib import Path
from typing import Any

from .report import Waterfall, summary, waterfall_data
from .runner import DemoResult

__all__ = ["render", "write_report"]

# The text waterfall's colours (report.RESULT_STYLES), as CSS.
COLORS = {
    "uncached": "#b04fc4",
    "cached": "#2a9d57",
    "hit": "#2a9d57",
    "coalesced": "#1c9bb5",
    "miss": "#d9a21b",
    "bypass": "#b04fc4",
    "write": "#d1495b",
}

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 980px;
       color: #1d2127; background: #fff; padding: 0 1rem; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.note { color: #5b6570; } table { border-collapse: collapse; margin: .6rem 0; }
td, th { padding: .25rem .7rem; border-bottom: 1px solid #e3e6ea; text-align: right; }
td:first-child, th:first-child { text-align: left; }
svg text { font: 11px system-ui, sans-serif; fill: #1d2127; }
.key span { display: inline-block; width: .8rem; height: .8rem; margin: 0 .3rem 0 1rem;
            vertical-align: middle; }
"""


def _value(data: dict[str, Any], key: str) -> Any:
    found: Any = data
    for part in key.split("."):
        found = found[int(part)] if isinstance(found, list) else found[part]
    return found


def _number(data: dict[str, Any], key: str) -> str:
    """A number from the summary, tagged with its path (its text is the JSON value)."""
    return f'<span data-key="{escape(key)}">{escape(json.dumps(_value(data, key)))}</span>'


def _legend(*names: str) -> str:
    return (
        '<p class="key">'
        + "".join(f'<span style="background:{COLORS[n]}"></span>{escape(n)}' for n in names)
        + "</p>"
    )


def _latency_chart(result: DemoResult) -> str:
    """Every search as a tick on a log time axis, one lane per run, with p50/p95 marks."""
    lanes = [("uncached", result.uncached), ("cached", result.cached)]
    values = [c.seconds * 1000 for _, run in lanes for c in run.agent.searches]
    low = max(min(values, default=0.01), 0.005)
    high = max(max(values, default=1.0), low * 10)
    lo, hi = math.log10(low) - 0.1, math.log10(high) + 0.1
    width, left, lane = 900, 90, 46

    def x(ms: float) -> float:
        return left + (math.log10(max(ms, low)) - lo) / (hi - lo) * (width - left - 20)

    parts = [f'<svg width="{width}" height="{len(lanes) * lane + 40}" role="img">']
    for row, (name, run) in enumerate(lanes):
        y = 10 + row * lane
        parts.append(f'<text x="0" y="{y + lane / 2}">{name}</text>')
        for call in run.agent.searches:
            position = x(call.seconds * 1000)
            parts.append(
                f'<line x1="{position:.1f}" x2="{position:.1f}" y1="{y + 6}" y2="{y + lane - 10}"'
                f' stroke="{COLORS[name]}" stroke-opacity=".55" stroke-width="2"/>'
            )
        for q in (0.5, 0.95):
            position = x(run.agent.search_latency(q) * 1000)
            parts.append(
                f'<line x1="{position:.1f}" x2="{position:.1f}" y1="{y + 2}" y2="{y + lane - 4}"'
                ' stroke="#1d2127" stroke-dasharray="3 2"/>'
                f'<text x="{position + 3:.1f}" y="{y + 9}">p{round(q * 100)}</text>'
            )
    axis_y = 10 + len(lanes) * lane
    parts.append(
        f'<line x1="{left}" x2="{width - 20}" y1="{axis_y}" y2="{axis_y}" stroke="#8a939c"/>'
    )
    for exponent in range(math.ceil(lo), math.floor(hi) + 1):
        ms = 10.0**exponent
        label = f"{ms:g} ms"
        parts.append(
            f'<line x1="{x(ms):.1f}" x2="{x(ms):.1f}" y1="{axis_y}" y2="{axis_y + 5}"'
            ' stroke="#8a939c"/>'
            f'<text x="{x(ms) - 12:.1f}" y="{axis_y + 18}">{label}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _turns_chart(data: dict[str, Any]) -> str:
    """Upstream requests per turn: uncached and cached bars side by side."""
    uncached = data["runs"]["uncached"]["turns"]
    cached = data["runs"]["cached"]["turns"]
    peak = max([t["upstream_requests"] or 0 for t in uncached + cached] + [1])
    width, left, bar, gap = 900, 40, 26, 34
    height = 200
    parts = [f'<svg width="{width}" height="{height + 40}" role="img">']
    for index, (before, after) in enumerate(zip(uncached, cached, strict=False)):
        x0 = left + index * (2 * bar + gap)
        for offset, (name, turn) in enumerate((("uncached", before), ("cached", after))):
            count = turn["upstream_requests"] or 0
            h = count / peak * (height - 20)
            x = x0 + offset * bar
            parts.append(
                f'<rect x="{x}" y="{height - h:.1f}" width="{bar - 3}" height="{h:.1f}"'
                f' fill="{COLORS[name]}"/>'
                f'<text x="{x + 2}" y="{height - h - 3:.1f}">{count}</text>'
            )
        parts.append(f'<text x="{x0}" y="{height + 16}">turn {before["index"]}</text>')
    parts.append(
        f'<line x1="{left}" x2="{width - 10}" y1="{height}" y2="{height}" stroke="#8a939c"/>'
    )
    parts.append("</svg>")
    return "".join(parts)


def _waterfall_chart(data: Waterfall) -> str:
    width, left, row_height = 900, 320, 20
    scale = (width - left - 90) / data.total_ms if data.total_ms > 0 else 0.0
    height = row_height * len(data.rows) + 30
    parts = [f'<svg width="{width}" height="{height}" role="img">']
    for number, row in enumerate(data.rows):
        y = 6 + number * row_height
        name = row.name if len(row.name) <= 48 else row.name[:47] + "…"
        bar = max(row.duration_ms * scale, 1.5)
        x = left + row.start_ms * scale
        parts.append(
            f'<text x="0" y="{y + 13}">{escape(name)}</text>'
            f'<rect x="{x:.1f}" y="{y + 3}" width="{bar:.1f}" height="{row_height - 6}"'
            f' fill="{COLORS.get(row.label, "#8a939c")}"/>'
            f'<text x="{x + bar + 4:.1f}" y="{y + 13}">{escape(row.label)}'
            f" {row.duration_ms:.2f} ms</text>"
        )
    axis_y = height - 18
    parts.append(
        f'<line x1="{left}" x2="{width - 90}" y1="{axis_y}" y2="{axis_y}" stroke="#8a939c"/>'
        f'<text x="{left}" y="{axis_y + 14}">0 ms</text>'
        f'<text x="{width - 140}" y="{axis_y + 14}">{data.total_ms:.1f} ms</text>'
    )
    parts.append("</svg>")
    return "".join(parts)


def render(result: DemoResult) -> str:
    """The report as one HTML document (no external resources)."""
    data = summary(result)

    def n(key: str) -> str:
        return _number(data, key)

    latency_rows = "".join(
        f"<tr><td>{name}</td>"
        + "".join(
            f"<td>{n(f'runs.{name}.search_latency_ms.{q}')} ms</td>" for q in ("p50", "p95", "p99")
        )
        + f"<td>{n(f'runs.{name}.searches')}</td></tr>"
        for name in ("uncached", "cached")
    )
    turn_rows = "".join(
        f"<tr><td>{escape(turn['title'])}</td>"
        f"<td>{n(f'runs.uncached.turns.{i}.upstream_requests')}</td>"
        f"<td>{n(f'runs.cached.turns.{i}.upstream_requests')}</td>"
        f"<td>{(turn['upstream_requests'] or 0) - (cached['upstream_requests'] or 0)}</td></tr>"
        for i, (turn, cached) in enumerate(
            zip(data["runs"]["uncached"]["turns"], data["runs"]["cached"]["turns"], strict=False)
        )
    )
    flow = waterfall_data(result)
    waterfall_section = (
        "<p>No trace was recorded for the waterfall.</p>"
        if flow is None
        else (
            f"<p>Turn {n('waterfall_turn')} ({escape(flow.title)}), {len(flow.rows)} memory "
            f"calls, {flow.total_ms:.1f} ms: one row per working-memory span, on the turn's "
            "time axis (Jaeger shows the same trace).</p>"
            + _legend("hit", "coalesced", "miss", "write")
            + _waterfall_chart(flow)
        )
    )
    target = (
        f"the emulator ({n('latency_ms')} ms latency)"
        if data["target"] == "emulator"
        else escape(str(data["target"]))
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>wm-middleware demo: uncached vs cached</title>
<style>{STYLE}</style></head>
<body>
<h1>wm-middleware demo: uncached vs cached</h1>
<p class="note">A scripted agent (SupermemoryTools), {n("turns")} turns against {target},
run uncached and then with <code>instrument()</code>.</p>
<p><strong>Upstream requests saved: {n("requests_saved")}</strong> of
{n("runs.uncached.upstream_requests")} (cached run: {n("runs.cached.upstream_requests")};
share saved {n("requests_saved_ratio")}).</p>

<h2>Per-search latency</h2>
<p class="note">Each tick is one <code>search_memories</code> call (log scale). Cached searches
that missed, or joined another caller's fetch, still wait for the upstream call.</p>
{_legend("uncached", "cached")}
{_latency_chart(result)}
<table><tr><th>run</th><th>p50</th><th>p95</th><th>p99</th><th>searches</th></tr>
{latency_rows}</table>

<h2>Upstream requests per turn</h2>
{_legend("uncached", "cached")}
{_turns_chart(data)}
<table><tr><th>turn</th><th>uncached</th><th>cached</th><th>saved</th></tr>
{turn_rows}</table>

<h2>Waterfall of one cached turn</h2>
{waterfall_section}
</body></html>
"""


def write_report(result: DemoResult, path: str | Path) -> Path:
    """Write :func:`render`'s page to ``path`` (UTF-8) and return the path."""
    target = Path(path)
    target.write_text(render(result), encoding="utf-8")
    return target
