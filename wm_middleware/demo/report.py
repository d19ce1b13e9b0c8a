"""What the demo prints: the JSON summary, the comparison table and a text trace waterfall.

The waterfall is drawn from the spans the cached run exported (in memory): one row per span of
one turn, a bar on a shared time axis, and each read labelled with its cache result. It is the
same trace Jaeger shows, readable in a terminal or a CI log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from .._telemetry import SEARCH_MEMORY, WRITE_SPANS
from .agent import TOOL_CALL_ID, TOOL_NAME, TURN_INDEX, TURN_SPAN
from .runner import DemoResult, RunResult
from .script import turns

__all__ = [
    "LATENCY_NOTE",
    "Waterfall",
    "WaterfallRow",
    "comparison_table",
    "export_report",
    "saved_line",
    "summary",
    "waterfall",
    "waterfall_data",
    "waterfall_turn",
]

RESULT_STYLES = {
    "hit": "green",
    "coalesced": "cyan",
    "miss": "yellow",
    "bypass": "magenta",
    "write": "red",
}


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def _run_summary(run: RunResult) -> dict[str, Any]:
    agent = run.agent
    searches = agent.searches
    return {
        "service_name": run.service_name,
        "upstream_requests": run.upstream,
        "upstream_source": run.upstream_source,
        "tool_calls": len(agent.calls),
        "searches": len(searches),
        "errors": [c.error for c in agent.errors],
        "search_latency_ms": {
            "p50": _ms(agent.search_latency(0.50)),
            "p95": _ms(agent.search_latency(0.95)),
            "p99": _ms(agent.search_latency(0.99)),
        },
        "wall_ms": _ms(agent.seconds),
        "turns": [
            {
                "index": t.index,
                "title": t.title,
                "wall_ms": _ms(t.seconds),
                "upstream_requests": t.upstream,
            }
            for t in agent.turns
        ],
        "cache": {
            "hits": run.results.get("hit", 0),
            "misses": run.results.get("miss", 0),
            "coalesced": run.results.get("coalesced", 0),
            "bypass": run.results.get("bypass", 0),
            "invalidations": run.stats.invalidations,
        },
    }


def _otlp_spans(result: DemoResult) -> dict[str, int] | None:
    counts = [r.otlp for r in (result.uncached, result.cached) if r.otlp is not None]
    if not counts:
        return None
    return {
        "delivered": sum(c.delivered for c in counts),
        "dropped": sum(c.dropped for c in counts),
    }


def summary(result: DemoResult) -> dict[str, Any]:
    """The machine-readable summary printed by ``wm-middleware demo --json``."""
    uncached, cached = _run_summary(result.uncached), _run_summary(result.cached)
    saved = result.uncached.upstream - result.cached.upstream
    return {
        "target": result.target,
        "turns": result.options.turns,
        "latency_ms": result.options.latency_ms if result.target == "emulator" else None,
        "otlp_endpoint": result.options.otlp_endpoint,
        "otlp_spans": _otlp_spans(result),
        "duration_s": result.options.duration,
        "rounds": {"uncached": result.uncached.rounds, "cached": result.cached.rounds},
        "runs": {"uncached": uncached, "cached": cached},
        "requests_saved": saved,
        "requests_saved_ratio": round(saved / result.uncached.upstream, 4)
        if result.uncached.upstream
        else 0.0,
        "waterfall_turn": waterfall_turn(result),
    }


def export_report(result: DemoResult, requested: str | None) -> str | None:
    """After a run with an OTLP endpoint: what reached the collector, when not all of it did.

    ``requested`` is the endpoint asked for (``--otlp-endpoint`` or the environment), also when
    the test export failed and nothing was exported.
    """
    if requested is None:
        return None
    runs = (result.uncached, result.cached)
    recorded = sum(r.spans_recorded for r in runs)
    counts = [r.otlp for r in runs if r.otlp is not None]
    if not counts:
        return f"nothing was received at {requested}: {recorded} spans dropped (not exported)"
    delivered = sum(c.delivered for c in counts)
    dropped = sum(c.dropped for c in counts)
    if delivered == 0:
        return f"nothing was received at {requested}: {dropped} spans dropped"
    if dropped:
        return f"{delivered} spans delivered to {requested}, {dropped} dropped"
    return None


def _duration(milliseconds: float) -> str:
    return f"{milliseconds:7.2f}" if milliseconds < 10 else f"{milliseconds:7.1f}"


def _ratio(before: float, after: float) -> str:
    """``after`` as a multiple of ``before``; below 0.01x it says so rather than "0.00x"."""
    if before <= 0:
        return ""
    ratio = after / before
    return "<0.01x" if ratio < 0.01 else f"{ratio:.2f}x"


def comparison_table(result: DemoResult) -> Table:
    """Uncached vs cached, one metric per row, with their ratio (lower is better)."""
    u, c = result.uncached, result.cached
    table = Table(
        title="Uncached vs instrument(); ratio = cached / uncached, lower is better",
        title_justify="left",
        show_edge=False,
    )
    table.add_column("metric")
    table.add_column("uncached", justify="right")
    table.add_column("cached", justify="right")
    table.add_column("ratio", justify="right")

    def row(label: str, before: float, after: float, unit: str = "", digits: int = 0) -> None:
        table.add_row(
            label, f"{before:.{digits}f}{unit}", f"{after:.{digits}f}{unit}", _ratio(before, after)
        )

    row("upstream requests", u.upstream, c.upstream)
    row("search_memories calls", len(u.agent.searches), len(c.agent.searches))
    for q in (0.50, 0.95, 0.99):
        row(
            f"per-search latency p{round(q * 100)}",
            u.agent.search_latency(q) * 1000,
            c.agent.search_latency(q) * 1000,
            " ms",
            1,
        )
    for before, after in zip(u.agent.turns, c.agent.turns, strict=True):
        row(
            f"wall time turn {before.index} ({before.title})",
            before.seconds * 1000,
            after.seconds * 1000,
            " ms",
            0,
        )
    row("wall time, all turns", u.agent.seconds * 1000, c.agent.seconds * 1000, " ms", 0)
    for result_name in ("hit", "miss", "coalesced", "bypass"):
        table.add_row(
            f"reads: {result_name}",
            str(u.results.get(result_name, 0)),
            str(c.results.get(result_name, 0)),
            "",
        )
    return table


LATENCY_NOTE = (
    "Per-search latency counts every call of the cached run: hits answer in microseconds, but "
    "misses and coalesced calls still wait on upstream, so its p50 depends on the share of hits "
    "and its p95/p99 stay near the upstream latency."
)


def saved_line(result: DemoResult) -> Text:
    before, after = result.uncached.upstream, result.cached.upstream
    share = f" ({(before - after) / before:.0%})" if before else ""
    return Text.assemble(
        ("Requests saved: ", "bold"),
        f"{before - after} of {before}{share}",
        f"  ·  {result.options.turns} turns, ",
        f"{result.options.latency_ms:g} ms emulated latency"
        if result.target == "emulator"
        else result.target,
    )


def waterfall_turn(result: DemoResult) -> int:
    """The turn the waterfall shows: the first one that writes (it has every kind of read)."""
    script = turns(result.options.turns)
    return next((i for i, turn in enumerate(script, start=1) if turn.writes), 1)


def _span_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    return context.span_id if context is not None else 0


def _descendants(spans: Sequence[ReadableSpan], root: ReadableSpan) -> list[ReadableSpan]:
    children: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        if span.parent is not None:
            children.setdefault(span.parent.span_id, []).append(span)
    found: list[ReadableSpan] = []
    pending = [root]
    while pending:
        span = pending.pop()
        for child in children.get(_span_id(span), []):
            found.append(child)
            pending.append(child)
    return found


@dataclass(frozen=True, slots=True)
class WaterfallRow:
    """One working-memory span of the waterfall turn, on the turn's time axis."""

    name: str  # the tool call that caused it, with its query
    label: str  # hit, miss, coalesced, write
    start_ms: float  # from the turn's start
    duration_ms: float


@dataclass(frozen=True, slots=True)
class Waterfall:
    """The cached run's trace of :func:`waterfall_turn`, as rows on a shared time axis."""

    turn: int
    title: str
    total_ms: float
    rows: tuple[WaterfallRow, ...]


def waterfall_data(result: DemoResult) -> Waterfall | None:
    """The rows of the waterfall (``None`` when no trace was recorded).

    Rows are labelled from the agent's own call records (matched by tool call id), so the
    query shows here without being exported on any span.
    """
    index = waterfall_turn(result)
    spans = result.cached.spans
    root = next(
        (
            s
            for s in spans
            if s.name.startswith(TURN_SPAN) and (s.attributes or {}).get(TURN_INDEX) == index
        ),
        None,
    )
    if root is None or root.start_time is None or root.end_time is None:
        return None
    queries = {c.call_id: c.query for c in result.cached.agent.calls}
    by_id = {_span_id(s): s for s in spans}
    origin = root.start_time
    rows: list[WaterfallRow] = []
    for span in sorted(_descendants(spans, root), key=lambda s: s.start_time or 0):
        attributes = span.attributes or {}
        if span.name == SEARCH_MEMORY:
            label = str(attributes.get("wm.cache.result", "?"))
        elif span.name in WRITE_SPANS:
            label = "write"
        else:
            continue
        parent = by_id.get(span.parent.span_id) if span.parent is not None else None
        parent_attributes = (parent.attributes or {}) if parent is not None else {}
        query = queries.get(str(parent_attributes.get(TOOL_CALL_ID, "")))
        tool = parent_attributes.get(TOOL_NAME, span.name)
        start = (span.start_time or origin) - origin
        length = (span.end_time or origin) - (span.start_time or origin)
        rows.append(
            WaterfallRow(
                name=f'{tool} "{query}"' if query else str(tool),
                label=label,
                start_ms=start / 1e6,
                duration_ms=length / 1e6,
            )
        )
    title = turns(result.options.turns)[index - 1].title
    return Waterfall(index, title, (root.end_time - root.start_time) / 1e6, tuple(rows))


def _glyphs(console: Console) -> tuple[str, str]:
    encoding = (console.encoding or "").lower()
    return ("█", "▏") if "utf" in encoding else ("#", "|")


def waterfall(result: DemoResult, console: Console) -> Group | Text:
    """The cached run's trace of :func:`waterfall_turn` as bars on a time axis."""
    data = waterfall_data(result)
    if data is None or data.total_ms <= 0:
        return Text("(no trace recorded for the waterfall)")
    rows, total = data.rows, data.total_ms
    full, thin = _glyphs(console)
    name_width = min(max((len(r.name) for r in rows), default=10), 36)
    suffix_width = 23  # " coalesced  1234.56 ms"
    bar_width = max(16, min(console.width, 120) - name_width - suffix_width - 3)
    lines: list[Text] = [
        Text.assemble(
            (f"Trace of cached turn {data.turn} ({data.title})", "bold"),
            f", {len(rows)} memory calls, {total:.1f} ms;"
            " one row per working-memory span (Jaeger shows the same trace)",
        ),
        Text(f"{'':{name_width}}  0 ms{'':{max(0, bar_width - 12)}}{total:>8.1f} ms"),
    ]
    for row in rows:
        begin = min(bar_width - 1, int(row.start_ms / total * bar_width))
        cells = round(row.duration_ms / total * bar_width)
        bar = full * cells if cells else thin
        bar = bar[: bar_width - begin]
        style = RESULT_STYLES.get(row.label, "")
        name = row.name
        short = name if len(name) <= name_width else name[: name_width - 1] + "…"
        lines.append(
            Text.assemble(
                f"{short:<{name_width}}  ",
                " " * begin,
                (bar, style),
                " " * (bar_width - begin - len(bar)),
                (f" {row.label:<9}", style),
                f" {_duration(row.duration_ms)} ms",
            )
        )
    return Group(*lines)
