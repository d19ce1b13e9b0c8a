"""What the demo prints: the JSON summary, the comparison table and a text trace waterfall.

The waterfall is drawn from the spans the cached run exported (in memory): one row per span of
one turn, a bar on a shared time axis, and each read labelled with its cache result. It is the
same trace Jaeger shows, readable in a terminal or a CI log.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from .agent import QUERY, TOOL_NAME, TURN_INDEX, TURN_SPAN
from .runner import DemoResult, RunResult
from .script import turns

__all__ = [
    "LATENCY_NOTE",
    "comparison_table",
    "saved_line",
    "summary",
    "waterfall",
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


def summary(result: DemoResult) -> dict[str, Any]:
    """The machine-readable summary printed by ``wm-middleware demo --json``."""
    uncached, cached = _run_summary(result.uncached), _run_summary(result.cached)
    saved = result.uncached.upstream - result.cached.upstream
    return {
        "target": result.target,
        "turns": result.options.turns,
        "latency_ms": result.options.latency_ms if result.target == "emulator" else None,
        "otlp_endpoint": result.options.otlp_endpoint,
        "runs": {"uncached": uncached, "cached": cached},
        "requests_saved": saved,
        "requests_saved_ratio": round(saved / result.uncached.upstream, 4)
        if result.uncached.upstream
        else 0.0,
        "waterfall_turn": waterfall_turn(result),
    }


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


def _glyphs(console: Console) -> tuple[str, str]:
    encoding = (console.encoding or "").lower()
    return ("█", "▏") if "utf" in encoding else ("#", "|")


def waterfall(result: DemoResult, console: Console) -> Group | Text:
    """The cached run's trace of :func:`waterfall_turn` as bars on a time axis."""
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
        return Text("(no trace recorded for the waterfall)")
    by_id = {_span_id(s): s for s in spans}
    rows: list[tuple[str, str, ReadableSpan]] = []
    for span in sorted(_descendants(spans, root), key=lambda s: s.start_time or 0):
        attributes = span.attributes or {}
        if span.name == "search_memory":
            label = str(attributes.get("wm.cache.result", "?"))
        elif span.name in ("update_memory", "delete_memory"):
            label = "write"
        else:
            continue
        parent = by_id.get(span.parent.span_id) if span.parent is not None else None
        parent_attributes = (parent.attributes or {}) if parent is not None else {}
        query = parent_attributes.get(QUERY)
        tool = parent_attributes.get(TOOL_NAME, span.name)
        name = f'{tool} "{query}"' if query else str(tool)
        rows.append((name, label, span))

    origin, total = root.start_time, root.end_time - root.start_time
    full, thin = _glyphs(console)
    name_width = min(max((len(r[0]) for r in rows), default=10), 36)
    suffix_width = 23  # " coalesced  1234.56 ms"
    bar_width = max(16, min(console.width, 120) - name_width - suffix_width - 3)
    title = turns(result.options.turns)[index - 1].title
    lines: list[Text] = [
        Text.assemble(
            (f"Trace of cached turn {index} ({title})", "bold"),
            f", {len(rows)} memory calls, {total / 1e6:.1f} ms;"
            " one row per working-memory span (Jaeger shows the same trace)",
        ),
        Text(f"{'':{name_width}}  0 ms{'':{max(0, bar_width - 12)}}{total / 1e6:>8.1f} ms"),
    ]
    for name, label, span in rows:
        start = (span.start_time or origin) - origin
        length = (span.end_time or origin) - (span.start_time or origin)
        begin = min(bar_width - 1, int(start / total * bar_width))
        cells = round(length / total * bar_width)
        bar = full * cells if cells else thin
        bar = bar[: bar_width - begin]
        style = RESULT_STYLES.get(label, "")
        short = name if len(name) <= name_width else name[: name_width - 1] + "…"
        lines.append(
            Text.assemble(
                f"{short:<{name_width}}  ",
                " " * begin,
                (bar, style),
                " " * (bar_width - begin - len(bar)),
                (f" {label:<9}", style),
                f" {_duration(length / 1e6)} ms",
            )
        )
    return Group(*lines)
