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
from opentelemetry.trace import SpanKind
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from ..semconv import CACHE_RESULT, SEARCH_MEMORY, WRITE_SPANS
from .agent import TOOL_CALL_ID, TOOL_NAME, TURN_INDEX, TURN_SPAN, percentile
from .runner import DemoResult, RunResult
from .script import NEW_MEMORY_MARK, turns

__all__ = [
    "FirstSeen",
    "Waterfall",
    "WaterfallRow",
    "comparison_table",
    "export_report",
    "first_seen",
    "first_seen_line",
    "hits_line",
    "latency_by_result",
    "milliseconds",
    "percent",
    "plural",
    "ratio",
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


# -- numbers as the terminal and the HTML report both show them ------------------------------
def milliseconds(value: float, digits: int | None = None) -> str:
    """``value`` ms as text: ``digits`` decimals, or by default one (two below 1 ms, where a hit
    answers: ``0.01 ms``, never ``0.0 ms``)."""
    if digits is None:
        digits = 2 if value < 1 else 1
    return f"{value:.{digits}f} ms"


def percent(share: float) -> str:
    """A share (0..1) as a whole percentage: ``0.5588`` -> ``56%``."""
    return f"{share:.0%}"


def plural(count: int, word: str, words: str | None = None) -> str:
    """``count`` and ``word``, in the plural unless ``count`` is 1: ``plural(1, "turn")`` is
    ``1 turn``, ``plural(3, "process", "processes")`` is ``3 processes``."""
    return f"{count} {word if count == 1 else (words or word + 's')}"


def ratio(before: float, after: float) -> str:
    """``after`` as a multiple of ``before``; below 0.01x it says so rather than "0.00x"."""
    if before <= 0:
        return ""
    value = after / before
    return "<0.01x" if value < 0.01 else f"{value:.2f}x"


@dataclass(frozen=True, slots=True)
class FirstSeen:
    """When one run's agent first saw the memory it wrote (``turn`` ``None``: not in the run)."""

    written_in_turn: int
    turn: int | None
    seconds_after_write: float | None  # from the write's answer to the search that showed it
    searches_before: int  # searches after the write whose results did not show it yet


def first_seen(run: RunResult) -> FirstSeen | None:
    """When ``run``'s agent first got the memory of its first ``add_memory`` back from a search
    (``None``: the run wrote nothing). A search shows it when its result has
    :data:`~wm_middleware.demo.script.NEW_MEMORY_MARK`, a word no seeded memory has."""
    calls = sorted(run.agent.calls, key=lambda c: c.start)
    write = next((c for c in calls if c.name == "add_memory" and c.ok), None)
    if write is None:
        return None
    written = write.start + write.seconds
    later = sorted(
        (c for c in calls if c.name == "search_memories" and c.start >= written),
        key=lambda c: c.start + c.seconds,
    )
    for number, search in enumerate(later):
        if NEW_MEMORY_MARK in search.result:
            seconds = search.start + search.seconds - written
            return FirstSeen(write.turn, search.turn, seconds, number)
    return FirstSeen(write.turn, None, None, len(later))


def _first_seen_summary(run: RunResult) -> dict[str, Any] | None:
    seen = first_seen(run)
    if seen is None:
        return None
    return {
        "written_in_turn": seen.written_in_turn,
        "first_seen_turn": seen.turn,
        "seconds_after_write": None
        if seen.seconds_after_write is None
        else round(seen.seconds_after_write, 3),
        "searches_before": seen.searches_before,
    }


def _quantiles(seconds: Sequence[float]) -> dict[str, float]:
    """p50, p95 and p99 of ``seconds``, in milliseconds."""
    return {f"p{round(q * 100)}": _ms(percentile(seconds, q)) for q in (0.50, 0.95, 0.99)}


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
        "search_latency_p50_ms_by_result": {
            name: _ms(percentile(seconds, 0.5))
            for name, seconds in sorted(latency_by_result(run).items())
        },
        "wall_ms": _ms(agent.seconds),
        "emulated_latency_s": None
        if run.emulated_latency is None
        else round(run.emulated_latency, 6),
        "turns": [
            {
                "index": t.index,
                "title": t.title,
                "wall_ms": _ms(t.seconds),
                "upstream_requests": t.upstream,
            }
            for t in agent.turns
        ],
        "new_memory": _first_seen_summary(run),
        # Every round of a --duration run (the fields above are the first round's): what
        # Jaeger's Monitor tab and the dashboard show of it.
        "all_rounds": {
            "rounds": run.rounds,
            "turn_latency_ms": _quantiles(run.all_rounds.turns),
            "search_latency_ms": _quantiles(run.all_rounds.searches),
        },
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
        "indexing_delay_s": result.options.indexing_delay if result.target == "emulator" else None,
        "pause_s": result.options.pause,
        "otlp_endpoint": result.options.otlp_endpoint,
        "otlp_spans": _otlp_spans(result),
        "duration_s": result.options.duration,
        "rounds": {"uncached": result.uncached.rounds, "cached": result.cached.rounds},
        "interrupted": result.interrupted,
        "runs": {"uncached": uncached, "cached": cached},
        "requests_saved": saved,
        "requests_saved_ratio": round(saved / result.uncached.upstream, 4)
        if result.uncached.upstream
        else 0.0,
        "wall_ratio": round(result.cached.agent.seconds / result.uncached.agent.seconds, 4)
        if result.uncached.agent.seconds > 0
        else 0.0,
        "waterfall_turn": waterfall_turn(result),
        "near": _near(result),
    }


def _near(result: DemoResult) -> dict[str, Any] | None:
    """With ``--semantic shadow`` or ``serve``: the cached run's near-duplicate report (its
    fields, the bounds rounded to 4 places, and the mode), else ``None``."""
    if result.options.semantic not in ("shadow", "serve"):
        return None
    from wm_middleware.semantic import report

    found = report(result.cached.stats)._asdict()
    found["bound"] = round(found["bound"], 4)
    found["served_bound"] = round(found["served_bound"], 4)
    found["mode"] = result.options.semantic
    return found


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


def _duration(value: float) -> str:
    return f"{milliseconds(value):>10}"


def _seen(seen: FirstSeen | None) -> str:
    if seen is None:
        return ""
    return "not seen" if seen.turn is None else f"turn {seen.turn}"


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
            label, f"{before:.{digits}f}{unit}", f"{after:.{digits}f}{unit}", ratio(before, after)
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
    seen = first_seen(u), first_seen(c)
    if seen[0] is not None:
        table.add_row(
            f"new memory (turn {seen[0].written_in_turn}) first seen", *map(_seen, seen), ""
        )
    for result_name in ("hit", "miss", "coalesced", "bypass"):
        table.add_row(
            f"reads: {result_name}",
            str(u.results.get(result_name, 0)),
            str(c.results.get(result_name, 0)),
            "",
        )
    return table


def saved_line(result: DemoResult) -> Text:
    """The headline: upstream requests saved and the wall time of all turns, cached vs not."""
    before, after = result.uncached.upstream, result.cached.upstream
    share = f" ({percent((before - after) / before)})" if before else ""
    slow, fast = result.uncached.agent.seconds * 1000, result.cached.agent.seconds * 1000
    return Text.assemble(
        ("Requests saved: ", "bold"),
        f"{before - after} of {before}{share}",
        "  ·  ",
        ("wall time: ", "bold"),
        f"{fast:.0f} ms against {slow:.0f} ms ({ratio(slow, fast)})",
        f"  ·  {plural(result.options.turns, 'turn')}, ",
        f"{result.options.latency_ms:g} ms emulated latency"
        if result.target == "emulator"
        else result.target,
    )


def latency_by_result(run: RunResult) -> dict[str, list[float]]:
    """The seconds of each of ``run``'s searches, by the cache result of its read (``hit``,
    ``miss``, ``coalesced``, ``bypass``; ``copy``: a miss answered without a request, by what
    the search answered before a write that is still being indexed, its span ``INTERNAL``). A
    search's result is on the ``search_memory`` span under its ``execute_tool`` span, matched
    by tool call id."""
    by_id = {_span_id(s): s for s in run.spans}
    results: dict[str, str] = {}
    for span in run.spans:
        if span.name != SEARCH_MEMORY or span.parent is None:
            continue
        parent = by_id.get(span.parent.span_id)
        call_id = (parent.attributes or {}).get(TOOL_CALL_ID) if parent is not None else None
        if call_id is not None:
            result = str((span.attributes or {}).get(CACHE_RESULT, "?"))
            copied = result == "miss" and span.kind == SpanKind.INTERNAL
            results[str(call_id)] = "copy" if copied else result
    found: dict[str, list[float]] = {}
    for call in run.agent.searches:
        found.setdefault(results.get(call.call_id, "?"), []).append(call.seconds)
    return found


def hits_line(result: DemoResult) -> Text:
    """What a cached search costs: a hit answers in well under a millisecond with no request,
    a miss waits on upstream as an uncached search does. The p50 of all cached searches, in
    the table, mixes the two in the proportion of hits."""
    by_result = latency_by_result(result.cached)
    hits = by_result.get("hit", [])
    waited = by_result.get("miss", []) + by_result.get("coalesced", [])
    searches = len(result.cached.agent.searches)
    uncached = result.uncached.agent.search_latency(0.5) * 1000
    parts: list[str | tuple[str, str]] = [("Per search: ", "bold")]
    if hits:
        parts.append(
            f"{len(hits)} of {searches} cached searches were hits, answered in "
            f"{milliseconds(percentile(hits, 0.5) * 1000)} (p50) without a request; "
        )
    else:
        parts.append(f"none of {searches} cached searches was a hit; ")
    copies = by_result.get("copy", [])
    if copies:
        parts.append(
            f"{len(copies)} after the write were served what they answered before it (true "
            "until it is indexed), without a request; "
        )
    if waited:
        parts.append(
            f"the {len(waited)} misses and coalesced reads waited on upstream, "
            f"{milliseconds(percentile(waited, 0.5) * 1000)} (p50), like the uncached "
            f"searches ({milliseconds(uncached)})."
        )
    else:
        parts.append(f"uncached, every search waited on upstream ({milliseconds(uncached)} p50).")
    return Text.assemble(*parts)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def first_seen_line(result: DemoResult) -> Text | None:
    """When each agent first saw the memory it wrote (``None``: the script wrote nothing)."""
    seen = {
        name: first_seen(run)
        for name, run in (("uncached", result.uncached), ("cached", result.cached))
    }
    if seen["uncached"] is None or seen["cached"] is None:
        return None
    turn = seen["uncached"].written_in_turn
    delay = result.options.indexing_delay
    indexing = (
        f"the emulator indexes it {delay:g} s after the write"
        if result.target == "emulator"
        else "the API indexes it asynchronously"
    )

    def said(name: str, found: FirstSeen) -> str:
        if found.turn is None:
            return f"the {name} agent does not see it in {plural(result.options.turns, 'turn')}"
        return (
            f"the {name} agent first sees it in turn {found.turn}, "
            f"{found.seconds_after_write or 0:.1f} s after the write"
        )

    return Text.assemble(
        ("New memory: ", "bold"),
        f"written in turn {turn}; {indexing}. ",
        _sentence(said("uncached", seen["uncached"])),
        "; ",
        said("cached", seen["cached"]),
        ".",
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


def waterfall_data(result: DemoResult, turn: int | None = None) -> Waterfall | None:
    """The rows of the cached run's waterfall of ``turn`` (default :func:`waterfall_turn`);
    ``None`` when no trace was recorded for it.

    Rows are labelled from the agent's own call records (matched by tool call id), so the
    query shows here without being exported on any span.
    """
    index = waterfall_turn(result) if turn is None else turn
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
            label = str(attributes.get(CACHE_RESULT, "?"))
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
            f", {plural(len(rows), 'memory call')}, {total:.1f} ms;"
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
                f" {_duration(row.duration_ms)}",
            )
        )
    return Group(*lines)
