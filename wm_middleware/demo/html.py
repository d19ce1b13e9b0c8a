"""``wm-middleware demo --html FILE``: the demo's result as one self-contained HTML page.

For people without Jaeger or Grafana at hand: the headline (wall time and upstream requests,
cached against uncached, and the p50 of a hit, a miss and an uncached search), wall time and
upstream requests per turn, per-search latency distributions, when each agent first saw the
memory it wrote, what serving near-duplicates would have saved and risked (``--semantic
shadow``), and the waterfall of every cached turn. Charts are inline SVG drawn here; there
is no script, stylesheet, font or image to fetch.

Every number on the page comes from :func:`~wm_middleware.demo.report.summary` (what ``--json``
prints): its element carries the path there in ``data-key`` (``runs.cached.upstream_requests``)
and the JSON value in ``data-value``, and shows the value as the terminal does (``56%``,
``105.7 ms``), so a test can check both.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from .report import Waterfall, milliseconds, percent, ratio, summary, waterfall_data
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
AXIS = "#8a939c"
WIDTH = 900

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 980px;
       color: #1d2127; background: #fff; padding: 0 1rem; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
h3 { font-size: 1rem; margin: 1.2rem 0 .2rem; }
.note { color: #5b6570; } table { border-collapse: collapse; margin: .6rem 0; }
td, th { padding: .25rem .7rem; border-bottom: 1px solid #e3e6ea; text-align: right; }
td:first-child, th:first-child { text-align: left; }
.headline { display: flex; gap: 1rem; margin: 1rem 0; }
.headline div { border: 1px solid #e3e6ea; border-radius: 6px; padding: .6rem 1rem; flex: 1; }
.headline .big { font-size: 1.6rem; font-weight: 600; display: block; }
svg text { font: 11px system-ui, sans-serif; fill: #1d2127; }
.key span { display: inline-block; width: .8rem; height: .8rem; margin: 0 .3rem 0 1rem;
            vertical-align: middle; }
"""


def _value(data: dict[str, Any], key: str) -> Any:
    found: Any = data
    for part in key.split("."):
        found = found[int(part)] if isinstance(found, list) else found[part]
    return found


def _wall(value: float) -> str:
    """A wall time in whole milliseconds, as the terminal's table shows it."""
    return f"{value:.0f} ms"


def _count(value: float) -> str:
    return f"{value:.0f}"


def _turn(value: int | None) -> str:
    return "not seen" if value is None else f"turn {value}"


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.1f} s"


def shown(key: str, value: Any) -> str:
    """How the page shows the summary's value at ``key`` (the terminal's formats)."""
    last = key.rsplit(".", 1)[-1]
    if value is None and last != "first_seen_turn":
        return "n/a"
    formats: dict[str, Callable[[Any], str]] = {
        "requests_saved_ratio": percent,
        "wall_ratio": lambda v: f"{v:.2f}x",
        "wall_ms": _wall,
        "first_seen_turn": _turn,
        "seconds_after_write": _seconds,
        "indexing_delay_s": lambda v: f"{v:g} s",
        "latency_ms": lambda v: f"{v:g} ms",
        "bound": lambda v: f"{v:.1%}",
        "served_bound": lambda v: f"{v:.2%}",
    }
    if last in formats:
        return formats[last](value)
    if ".search_latency_ms." in key or ".search_latency_p50_ms_by_result." in key:
        return milliseconds(float(value))
    return str(value)


def _number(data: dict[str, Any], key: str) -> str:
    """A number from the summary: its path and JSON value in attributes, shown formatted."""
    value = _value(data, key)
    return (
        f'<span data-key="{escape(key)}" data-value="{escape(json.dumps(value))}">'
        f"{escape(shown(key, value))}</span>"
    )


def _legend(*names: str) -> str:
    return (
        '<p class="key">'
        + "".join(f'<span style="background:{COLORS[n]}"></span>{escape(n)}' for n in names)
        + "</p>"
    )


def _axis_ticks(peak: float, least_step: float = 0.0) -> list[float]:
    """Ticks from 0 to just above ``peak`` at a step of 1, 2 or 5 times a power of ten (at
    least ``least_step``), at most six steps: the tallest bar fills most of the axis."""
    if peak <= 0:
        return [0.0, max(least_step, 1.0)]
    power = 10.0 ** math.floor(math.log10(peak / 6))
    step = next(s * power for s in (1, 2, 5, 10) if peak / (s * power) <= 6)
    step = max(step, least_step)
    count = math.ceil(peak / step - 1e-9)
    return [step * i for i in range(count + 1)]


def _decade(ms: float) -> str:
    return f"{ms / 1000:g} s" if ms >= 1000 else f"{ms:g} ms"


def _latency_axis(values: Sequence[float]) -> tuple[int, int]:
    """Decades (powers of ten, in ms) at or below the fastest call and at or above the
    slowest: every tick lies on the axis, the first to the left of every call."""
    positive = [v for v in values if v > 0] or [1.0]
    low = math.floor(math.log10(min(positive)))
    high = math.ceil(math.log10(max(positive)))
    return low, max(high, low + 1)


def _latency_chart(data: dict[str, Any], result: DemoResult) -> str:
    """Every search as a tick on a log time axis, one lane per run, with p50 and p95 marks
    (p50 labelled to the left of its mark, p95 to the right: close marks never collide)."""
    lanes = [("uncached", result.uncached), ("cached", result.cached)]
    values = [c.seconds * 1000 for _, run in lanes for c in run.agent.searches]
    low, high = _latency_axis(values)
    left, right, lane = 90, 30, 50

    def x(ms: float) -> float:
        position = (math.log10(max(ms, 10.0**low)) - low) / (high - low)
        return left + position * (WIDTH - left - right)

    parts = [
        f'<svg width="{WIDTH}" height="{len(lanes) * lane + 40}" role="img" data-chart="latency">'
    ]
    for row, (name, run) in enumerate(lanes):
        y = 10 + row * lane
        parts.append(f'<text x="0" y="{y + lane / 2}">{name}</text>')
        for call in run.agent.searches:
            position = x(call.seconds * 1000)
            parts.append(
                f'<line x1="{position:.1f}" x2="{position:.1f}" y1="{y + 14}" y2="{y + lane - 6}"'
                f' stroke="{COLORS[name]}" stroke-opacity=".55" stroke-width="2" data-call="1"/>'
            )
        for quantile, anchor, shift in (("p50", "end", -4), ("p95", "start", 4)):
            ms = data["runs"][name]["search_latency_ms"][quantile]
            position = x(ms)
            parts.append(
                f'<line x1="{position:.1f}" x2="{position:.1f}" y1="{y + 2}" y2="{y + lane - 2}"'
                ' stroke="#1d2127" stroke-dasharray="3 2"/>'
                f'<text x="{position + shift:.1f}" y="{y + 10}" text-anchor="{anchor}"'
                f' data-lane="{name}" data-quantile="{quantile}">'
                f"{quantile} {escape(milliseconds(ms))}</text>"
            )
    axis_y = 10 + len(lanes) * lane
    parts.append(
        f'<line x1="{left}" x2="{WIDTH - right}" y1="{axis_y}" y2="{axis_y}" stroke="{AXIS}"/>'
    )
    for exponent in range(low, high + 1):
        ms = 10.0**exponent
        parts.append(
            f'<line x1="{x(ms):.1f}" x2="{x(ms):.1f}" y1="{axis_y}" y2="{axis_y + 5}"'
            f' stroke="{AXIS}"/>'
            f'<text x="{x(ms):.1f}" y="{axis_y + 18}" text-anchor="middle" data-tick="{ms:g}">'
            f"{_decade(ms)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _bar_chart(
    groups: Sequence[str],
    series: Mapping[str, Sequence[float]],
    label: Callable[[float], str],
    least_step: float = 0.0,
    chart: str = "bars",
) -> str:
    """Bars per group, one per series, over the whole width, on a y axis from 0 with ticks."""
    left, right, top, height = 60, 10, 16, 200
    ticks = _axis_ticks(max([v for values in series.values() for v in values] + [0.0]), least_step)
    peak = ticks[-1]
    group_width = (WIDTH - left - right) / max(len(groups), 1)
    bar = group_width * 0.8 / max(len(series), 1)
    bottom = top + height

    def y(value: float) -> float:
        return bottom - value / peak * height

    parts = [f'<svg width="{WIDTH}" height="{bottom + 40}" role="img" data-chart="{chart}">']
    for value in ticks:
        parts.append(
            f'<line x1="{left}" x2="{WIDTH - right}" y1="{y(value):.1f}" y2="{y(value):.1f}"'
            f' stroke="{AXIS}" stroke-opacity="{1 if value == 0 else 0.3}"/>'
            f'<text x="{left - 6}" y="{y(value) + 4:.1f}" text-anchor="end">{label(value)}</text>'
        )
    for index, group in enumerate(groups):
        x0 = left + index * group_width + group_width * 0.1
        for offset, (name, values) in enumerate(series.items()):
            value = values[index]
            x = x0 + offset * bar
            parts.append(
                f'<rect x="{x:.1f}" y="{y(value):.1f}" width="{bar - 3:.1f}"'
                f' height="{bottom - y(value):.1f}" fill="{COLORS[name]}"/>'
                f'<text x="{x + (bar - 3) / 2:.1f}" y="{y(value) - 4:.1f}"'
                f' text-anchor="middle">{label(value)}</text>'
            )
        parts.append(
            f'<text x="{x0 + group_width * 0.4:.1f}" y="{bottom + 18}"'
            f' text-anchor="middle">{escape(group)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _waterfall_chart(data: Waterfall) -> str:
    left, right, row_height = 320, 110, 20
    scale = (WIDTH - left - right) / data.total_ms if data.total_ms > 0 else 0.0
    height = row_height * len(data.rows) + 30
    parts = [f'<svg width="{WIDTH}" height="{height}" role="img" data-chart="waterfall">']
    for number, row in enumerate(data.rows):
        y = 6 + number * row_height
        name = row.name if len(row.name) <= 48 else row.name[:47] + "…"
        bar = max(row.duration_ms * scale, 1.5)
        x = left + row.start_ms * scale
        parts.append(
            f'<text x="0" y="{y + 13}">{escape(name)}</text>'
            f'<rect x="{x:.1f}" y="{y + 3}" width="{bar:.1f}" height="{row_height - 6}"'
            f' fill="{COLORS.get(row.label, AXIS)}"/>'
            f'<text x="{x + bar + 4:.1f}" y="{y + 13}">{escape(row.label)}'
            f" {escape(milliseconds(row.duration_ms))}</text>"
        )
    axis_y = height - 18
    parts.append(
        f'<line x1="{left}" x2="{WIDTH - right}" y1="{axis_y}" y2="{axis_y}" stroke="{AXIS}"/>'
        f'<text x="{left}" y="{axis_y + 14}">0 ms</text>'
        f'<text x="{WIDTH - right}" y="{axis_y + 14}" text-anchor="end">'
        f"{_wall(data.total_ms)}</text>"
    )
    parts.append("</svg>")
    return "".join(parts)


def _per_search(data: dict[str, Any], n: Callable[[str], str]) -> str:
    """What a cached search costs by its result (p50): a hit, a miss, an uncached search."""
    key = "runs.{}.search_latency_p50_ms_by_result.{}"
    cached = data["runs"]["cached"]["search_latency_p50_ms_by_result"]
    uncached = data["runs"]["uncached"]["search_latency_p50_ms_by_result"]
    if "hit" not in cached or "miss" not in cached or "bypass" not in uncached:
        return ""
    return f"""<div>Per search (p50)<span class="big">{n(key.format("cached", "hit"))} a hit</span>
{n(key.format("cached", "miss"))} a miss, {n(key.format("uncached", "bypass"))} uncached</div>"""


def _headline(data: dict[str, Any], n: Callable[[str], str]) -> str:
    return f"""<div class="headline">
<div>Wall time, all turns<span class="big">{n("runs.cached.wall_ms")} cached</span>
against {n("runs.uncached.wall_ms")} uncached ({n("wall_ratio")})</div>
<div>Upstream requests<span class="big">{n("requests_saved")} saved
({n("requests_saved_ratio")})</span>
{n("runs.cached.upstream_requests")} cached against {n("runs.uncached.upstream_requests")}
uncached</div>
{_per_search(data, n)}
</div>"""


def _per_turn(data: dict[str, Any], n: Callable[[str], str]) -> str:
    """Wall time and upstream requests per turn: two charts and one table."""
    uncached, cached = data["runs"]["uncached"]["turns"], data["runs"]["cached"]["turns"]
    groups = [f"turn {t['index']} ({t['title']})" for t in uncached]

    def series(field: str) -> dict[str, list[float]]:
        return {
            "uncached": [float(t[field] or 0) for t in uncached],
            "cached": [float(t[field] or 0) for t in cached],
        }

    rows = "".join(
        f"<tr><td>{escape(groups[i])}</td>"
        f"<td>{n(f'runs.uncached.turns.{i}.wall_ms')}</td>"
        f"<td>{n(f'runs.cached.turns.{i}.wall_ms')}</td>"
        f"<td>{ratio(before['wall_ms'], after['wall_ms'])}</td>"
        f"<td>{n(f'runs.uncached.turns.{i}.upstream_requests')}</td>"
        f"<td>{n(f'runs.cached.turns.{i}.upstream_requests')}</td>"
        f"<td>{(before['upstream_requests'] or 0) - (after['upstream_requests'] or 0)}</td></tr>"
        for i, (before, after) in enumerate(zip(uncached, cached, strict=False))
    )
    return f"""<h2>Wall time per turn</h2>
{_legend("uncached", "cached")}
{_bar_chart(groups, series("wall_ms"), _wall, chart="wall-per-turn")}
<h2>Upstream requests per turn</h2>
{_legend("uncached", "cached")}
{_bar_chart(groups, series("upstream_requests"), _count, 1.0, "requests-per-turn")}
<table><tr><th>turn</th><th>wall uncached</th><th>wall cached</th><th>ratio</th>
<th>requests uncached</th><th>requests cached</th><th>saved</th></tr>
{rows}</table>"""


def _latency(data: dict[str, Any], result: DemoResult, n: Callable[[str], str]) -> str:
    rows = "".join(
        f"<tr><td>{name}</td>"
        + "".join(
            f"<td>{n(f'runs.{name}.search_latency_ms.{q}')}</td>" for q in ("p50", "p95", "p99")
        )
        + f"<td>{n(f'runs.{name}.searches')}</td></tr>"
        for name in ("uncached", "cached")
    )
    return f"""<h2>Per-search latency</h2>
<p class="note">Each tick is one <code>search_memories</code> call (log scale). Cached searches
that missed, or joined another caller's fetch, still wait for the upstream call, so the saving
shows in the wall time and the requests above rather than in p95.</p>
{_legend("uncached", "cached")}
{_latency_chart(data, result)}
<table><tr><th>run</th><th>p50</th><th>p95</th><th>p99</th><th>searches</th></tr>
{rows}</table>"""


def _new_memory(data: dict[str, Any], n: Callable[[str], str]) -> str:
    seen = data["runs"]["uncached"]["new_memory"]
    if seen is None or data["runs"]["cached"]["new_memory"] is None:
        return ""
    indexing = (
        f"The emulator indexes a memory {n('indexing_delay_s')} after it is written."
        if data["indexing_delay_s"] is not None
        else "The API indexes a memory asynchronously."
    )
    rows = "".join(
        f"<tr><td>{name}</td><td>{n(f'runs.{name}.new_memory.first_seen_turn')}</td>"
        f"<td>{n(f'runs.{name}.new_memory.seconds_after_write')}</td>"
        f"<td>{n(f'runs.{name}.new_memory.searches_before')}</td></tr>"
        for name in ("uncached", "cached")
    )
    return f"""<h2>When each agent first sees the memory written in turn
{n("runs.uncached.new_memory.written_in_turn")}</h2>
<p class="note">{indexing} A search shows the memory once its result contains it.</p>
<table><tr><th>run</th><th>first seen</th><th>after the write</th>
<th>searches before</th></tr>
{rows}</table>"""


def _near(data: dict[str, Any], n: Callable[[str], str]) -> str:
    """With ``--semantic shadow`` or ``serve``: of the cached run's misses, what serving
    near-duplicates would have saved and risked (``wm_middleware.semantic.report``), and with
    ``serve`` what was served."""
    near = data.get("near")
    if near is None:
        return ""
    if near.get("mode") == "serve":
        return f"""<h2>Near-duplicates (serve mode)</h2>
<p>Of {n("near.misses")} misses of the cached run, {n("near.candidates")} had a candidate:
{n("near.agreed")} agreed, {n("near.disagreed")} disagreed (disagreement &lt;=
{n("near.bound")} at 95%). {n("near.served")} near hits were served
({n("near.verified")} verified by a fetch) under a disagreement bound of at most
{n("near.served_bound")} at 95%.</p>
<p class="note">A near hit is served only once its configuration's verdicts bound disagreement
at or below 1% (299 agreeing verdicts, docs/semantic.md); the demo's script repeats its queries
word for word, so it collects none and serves none.</p>"""
    return f"""<h2>Near-duplicates (shadow mode)</h2>
<p>Of {n("near.misses")} misses of the cached run, {n("near.candidates")} had a candidate:
{n("near.agreed")} agreed, {n("near.disagreed")} disagreed (disagreement &lt;=
{n("near.bound")} at 95%). Serving them would have saved {n("near.agreed")} fetches and risked
{n("near.disagreed")} wrong answers; {n("near.vetoed")} vetoed, {n("near.errors")} embedding
errors.</p>
<p class="note">Nothing was served: each miss was fetched and compared with the nearest cached
query of its partition (docs/semantic.md). Serving is worth considering only where the bound is
at most 1%.</p>"""


def _waterfalls(data: dict[str, Any], result: DemoResult) -> str:
    """The cached run's waterfall of every turn, each with both runs' wall time."""
    parts = [
        "<h2>Waterfall of every cached turn</h2>",
        _legend("hit", "coalesced", "miss", "write"),
    ]
    for index, before in enumerate(data["runs"]["uncached"]["turns"], start=1):
        flow = waterfall_data(result, index)
        after = data["runs"]["cached"]["turns"][index - 1]
        parts.append(
            f"<h3>Turn {index} ({escape(before['title'])}): {_wall(after['wall_ms'])} cached, "
            f"{_wall(before['wall_ms'])} uncached</h3>"
        )
        if flow is None:
            parts.append("<p>No trace was recorded for this turn.</p>")
        else:
            parts.append(
                f'<p class="note">{len(flow.rows)} memory calls: one row per working-memory span '
                "on the turn's time axis (Jaeger shows the same trace).</p>"
                + _waterfall_chart(flow)
            )
    return "\n".join(parts)


def render(result: DemoResult) -> str:
    """The report as one HTML document (no external resources)."""
    data = summary(result)

    def n(key: str) -> str:
        return _number(data, key)

    target = (
        f"the emulator ({n('latency_ms')} latency, +-20%)"
        if data["target"] == "emulator"
        else escape(str(data["target"]))
    )
    turns = "turn" if data["turns"] == 1 else "turns"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>wm-middleware demo: uncached vs cached</title>
<style>{STYLE}</style></head>
<body>
<h1>wm-middleware demo: uncached vs cached</h1>
<p class="note">A scripted agent (SupermemoryTools), {n("turns")} {turns} against {target},
run uncached and then with <code>instrument()</code>; both runs get the same seeded latencies.</p>
{_headline(data, n)}
{_new_memory(data, n)}
{_per_turn(data, n)}
{_latency(data, result, n)}
{_near(data, n)}
{_waterfalls(data, result)}
</body></html>
"""


def write_report(result: DemoResult, path: str | Path) -> Path:
    """Write :func:`render`'s page to ``path`` (UTF-8) and return the path."""
    target = Path(path)
    target.write_text(render(result), encoding="utf-8")
    return target
