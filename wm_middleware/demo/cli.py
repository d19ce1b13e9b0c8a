"""``wm-middleware demo``: its options, how they are checked, and the run that prints the report.

:data:`DEMO` is the command: one table of options, in the order ``--help`` lists them. A new
option is one row there; if it does not go with another, one line in :func:`_mistake`. The
console script (``wm_middleware.__main__``) builds its parser from this table and dispatches
here; so does ``serve``'s, with :class:`Command` and :func:`number`.

Like any application, this module uses only what ``wm_middleware`` exports; it imports nothing
heavy at start-up (``rich``, the SDKs and the OpenTelemetry SDK come with the run), so that
``--help`` and a mistake in the arguments answer at once, also without the ``demo`` extra.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "DEMO",
    "INTERRUPTED",
    "Command",
    "consoles",
    "latency_ms",
    "missing_extra",
    "number",
    "seconds",
]

# The exit status of a process stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130

_Number = TypeVar("_Number", int, float)


def number(
    parse: Callable[[str], _Number], expected: str, low: float, high: float, out_of_range: str
) -> Callable[[str], _Number]:
    """An argparse type: ``parse`` the text, then keep ``low <= value <= high`` (NaN is outside
    every range). The errors are ``expected <expected>, got '<text>'`` and ``out_of_range``
    formatted with ``value`` and ``text``."""

    def convert(text: str) -> _Number:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(out_of_range.format(value=value, text=text))
        return value

    return convert


def seconds(high: float) -> Callable[[str], float]:
    """An argparse type for a number of seconds from 0 to ``high``."""
    return number(float, "seconds", 0, high, f"must be between 0 and {high:g} s, got {{text!r}}")


positive_int = number(int, "a whole number", 1, math.inf, "must be at least 1, got {value}")
latency_ms = number(
    float, "milliseconds", 0, 10_000, "must be between 0 and 10000 ms, got {value:g}"
)


def _duration(text: str) -> float:
    """``90``, ``90s``, ``2m`` or ``1h`` -> seconds."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    amount, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        value = float(amount) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 90s, 2m or 1h, got {text!r}"
        ) from None
    if not 1 <= value <= 24 * 3600:
        raise argparse.ArgumentTypeError(f"must be between 1s and 24h, got {text!r}")
    return value


def _http_url(text: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"expected a URL starting with http:// or https://, got {text!r}"
        )
    try:
        parts.port  # noqa: B018 -- parsing the port is the check
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid port in {text!r}") from None
    return text.strip().rstrip("/")


def _redis_url(text: str) -> str:
    """A URL the shared tier takes, judged by ``RedisTier`` itself (it connects only when used):
    the schemes and the parsing are the library's, not a copy of them here."""
    value = text.strip()
    try:
        from .. import RedisTier
    except ImportError:
        return value  # no redis-py: the run says which extra is missing, in one line
    try:
        RedisTier(value).close()
    except (TypeError, ValueError) as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


@dataclass(frozen=True)
class Command:
    """A subcommand: its line in the top-level help, its own description, its options (each an
    ``add_argument`` call, flag and keywords, in the order its ``--help`` lists them) and what
    runs it: ``run(args, parser)`` returns the exit status; ``parser.error`` reports a mistake."""

    name: str
    help: str
    description: str
    options: tuple[tuple[str, dict[str, Any]], ...]
    run: Callable[[argparse.Namespace, argparse.ArgumentParser], int]


def _supermemory_major() -> int | None:
    """The major version of the installed ``supermemory`` SDK (``None``: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version("supermemory").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return None


def missing_extra(error: ImportError, extra: str) -> int:
    """One line naming what is missing and an install that fits this environment; status 1.

    The demo's extra pins supermemory 3.x (its integration, supermemory-openai-sdk, needs
    ``supermemory<5``): in a 5.x environment, installing it would downgrade the SDK the
    application uses, so the line says to give the demo the environment the README sets up for
    it (``.venv``) instead.
    """
    missing = error.name or error
    major = _supermemory_major() if extra == "demo" else None
    if major is not None and major >= 5:
        print(
            f"wm-middleware: {missing} is not installed; the demo needs supermemory 3.x and this "
            f"environment has supermemory {major}.x, which pip install 'wm-middleware[demo]' "
            "would downgrade: give the demo an environment of its own (python3 -m venv "
            ".venv && .venv/bin/python -m pip install 'wm-middleware[demo]', or "
            "-e '.[demo]' in a checkout)",
            file=sys.stderr,
        )
        return 1
    print(
        f"wm-middleware: {missing} is not installed; "
        f"pip install 'wm-middleware[{extra}]' (or pip install -e '.[{extra}]' in a checkout)",
        file=sys.stderr,
    )
    return 1


# -- checks made before anything runs ---------------------------------------------------------
def _otlp_requested(args: argparse.Namespace) -> bool:
    """Whether an OTLP endpoint is asked for: ``--otlp-endpoint`` or the standard variables."""
    names = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return bool(args.otlp_endpoint) or any(os.environ.get(name, "").strip() for name in names)


# Options of the two-run demo that a --workers run has no use for.
_NOT_WITH_WORKERS = ("api_key", "base_url", "otlp_endpoint", "duration", "html")


def _html_mistake(path: str) -> str | None:
    """Why ``--html`` could not be written, found before the runs instead of after them."""
    target = Path(path)
    if target.is_dir():
        return f"--html {path} is a directory; name a file, e.g. {target / 'report.html'}"
    folder = target.parent
    if not folder.is_dir():
        return f"--html {path}: there is no directory {folder}"
    if not os.access(target if target.exists() else folder, os.W_OK):
        return f"--html {path}: {target if target.exists() else folder} is not writable"
    return None


def _mistake(args: argparse.Namespace) -> str | None:
    """The first pair of options that do not go together, as its usage error says it."""
    if args.redis_url and args.workers is None:
        return "--redis-url needs --workers"
    if args.workers is not None:
        given = [name for name in _NOT_WITH_WORKERS if getattr(args, name)]
        if given:
            option = "--" + given[0].replace("_", "-")
            return f"--workers runs against the emulator; drop {option}"
    elif args.base_url and not (args.api_key or os.environ.get("SUPERMEMORY_API_KEY")):
        return "--base-url needs --api-key or SUPERMEMORY_API_KEY"
    elif args.indexing_delay is not None and (args.api_key or args.base_url):
        return "--indexing-delay is the emulator's; drop it with --api-key"
    elif args.duration is not None and not _otlp_requested(args):
        return (
            "--duration keeps both deployments running for a dashboard to fill, so it "
            "needs --otlp-endpoint URL (or OTEL_EXPORTER_OTLP_ENDPOINT); without one, "
            "run the demo without --duration"
        )
    return _html_mistake(args.html) if args.html else None


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    mistake = _mistake(args)
    if mistake is not None:
        parser.error(mistake)
    return _two_runs(args) if args.workers is None else _fleet(args)


# -- --workers N: local-only vs shared across N processes ------------------------------------
def _fleet(args: argparse.Namespace) -> int:
    try:
        from .fleet import FleetOptions, fleet_saved_line, fleet_summary, fleet_table, run_fleet
        from .report import plural
        from .runner import DemoError
    except ImportError as error:
        return missing_extra(error, "demo")
    options = FleetOptions(
        args.workers, args.turns, args.latency_ms, args.redis_url, args.indexing_delay or 0.0
    )
    out, _ = consoles()
    processes = plural(args.workers, "worker process", "worker processes")
    if not args.json:
        out.print(
            f"wm-middleware demo: a scripted agent in {processes}, "
            f"{plural(args.turns, 'turn')} each against the emulator "
            f"({args.latency_ms:g} ms latency), local-only then with a shared tier"
        )

    def started(mode: str) -> None:
        if not args.json:
            label = "local only" if mode == "local" else "shared tier"
            out.print(f"  {label}: {processes} started, playing the script")

    try:
        result = run_fleet(options, started)
    except ImportError as error:
        return missing_extra(error, "demo")
    except DemoError as error:
        print(f"wm-middleware demo: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(fleet_summary(result), indent=2))
    else:
        out.print()
        out.print(fleet_table(result))
        out.print(fleet_saved_line(result))
    failed = result.local.failed + result.shared.failed
    if failed:
        print(f"wm-middleware demo: {plural(failed, 'tool call')} failed", file=sys.stderr)
        return 1
    return 0


# -- the two runs, uncached then cached ------------------------------------------------------
def _export_settings(args: argparse.Namespace, notes: list[str]) -> dict[str, Any]:
    """The OTLP settings of the run after checking the collector with real exports: a
    collector that refuses traces means no export at all, one that refuses metrics (a
    traces-only backend) means traces only; each said once, in ``notes``.

    Raises:
        ValueError: an unsupported OTLP protocol.
    """
    from .runner import check_collector, check_metrics, otlp_target

    endpoint, from_env = otlp_target(args.otlp_endpoint)
    protocol, problem = check_collector(endpoint, from_env, args.otlp_protocol)
    duration, metrics = args.duration, True
    if endpoint is not None and problem is not None:
        once = f", and running the script once instead of for {duration:g} s" if duration else ""
        notes.append(f"no OTLP collector reachable at {endpoint} ({problem}); not exporting{once}")
        endpoint, from_env, duration = None, False, None
    elif endpoint is not None:
        refused = check_metrics(endpoint, from_env, args.otlp_protocol)
        metrics = refused is None
        what = "both runs" if metrics else "both runs' traces"
        notes.append(
            f"exporting {what} to {endpoint} over {protocol} as services agent-uncached "
            "and agent-cached"
        )
        if refused is not None:
            notes.append(
                f"the collector at {endpoint} refused a metric export ({refused}): it takes "
                "traces only, so no metrics are sent"
            )
    if duration is not None:
        notes.append(f"keeping both deployments running side by side for {duration:g} s")
    return {
        "otlp_endpoint": endpoint,
        "otlp_from_env": from_env,
        "otlp_protocol": protocol,
        "otlp_metrics": metrics,
        "duration": duration,
    }


def consoles() -> tuple[Any, Any]:
    """``rich`` consoles on stdout and stderr; in a log or a pipe, a sentence stays on one line
    instead of breaking at 80 columns."""
    from rich.console import Console

    out = Console(highlight=False)
    err = Console(stderr=True, highlight=False)
    for console in (out, err):
        console.soft_wrap = not console.is_terminal
    return out, err


def _two_runs(args: argparse.Namespace) -> int:
    import asyncio

    try:
        from .console import ConsoleProgress
        from .report import plural
        from .runner import DemoError, DemoOptions, otlp_target, run_demo, target_of
    except ImportError as error:
        return missing_extra(error, "demo")
    out, err = consoles()
    notes: list[str] = []
    try:
        export = _export_settings(args, notes)
    except ValueError as error:
        print(f"wm-middleware demo: {error}", file=sys.stderr)
        return 2
    indexing = {} if args.indexing_delay is None else {"indexing_delay": args.indexing_delay}
    options = DemoOptions(
        turns=args.turns,
        latency_ms=args.latency_ms,
        api_key=args.api_key,
        base_url=args.base_url,
        semantic=args.semantic,
        **indexing,
        **export,
    )
    # Progress goes where it cannot corrupt the JSON: stdout in text mode, stderr with --json.
    progress_console = err if args.json else out
    progress = ConsoleProgress(progress_console, quiet=args.json and not err.is_terminal)
    if not args.json:
        out.print(
            f"wm-middleware demo: a scripted agent (SupermemoryTools), "
            f"{plural(args.turns, 'turn')} against {target_of(options)}, uncached then cached"
        )
    for note in notes:
        progress_console.print(f"[dim]{note}[/dim]")
    try:
        result = asyncio.run(run_demo(options, progress))
    except ImportError as error:
        return missing_extra(error, "demo")
    except DemoError as error:
        print(f"wm-middleware demo: {error}", file=sys.stderr)
        return 1
    finally:
        progress.close()  # a bar left running would redraw itself after the last line
    written = _report(args, result, out, progress_console)
    status = _outcome(result, otlp_target(args.otlp_endpoint)[0])  # asked for, reached or not
    if result.interrupted:  # Ctrl-C during --duration: the first round is reported above
        print("wm-middleware demo: interrupted", file=sys.stderr)
        return INTERRUPTED
    return status or (0 if written else 1)


def _report(args: argparse.Namespace, result: Any, out: Any, progress_console: Any) -> bool:
    """The report: JSON, or the table, the headline lines and the waterfall; then the HTML
    file, if asked for. Returns whether that file was written: an output error is one line
    after the report, never instead of it."""
    from .report import (
        comparison_table,
        first_seen_line,
        hits_line,
        saved_line,
        summary,
        waterfall,
    )

    if args.json:
        print(json.dumps(summary(result), indent=2))
    else:
        out.print()
        out.print(comparison_table(result))
        out.print()
        out.print(saved_line(result))
        out.print(hits_line(result))
        seen = first_seen_line(result)
        if seen is not None:
            out.print(seen)
        out.print()
        out.print(waterfall(result, out))
        if args.semantic in ("shadow", "serve"):
            from wm_middleware.semantic import report

            out.print(f"near-duplicates, cached run: {report(result.cached.stats)}")
        if args.semantic == "serve":
            stats = result.cached.stats
            out.print(
                f"near hits, cached run: {stats.near_served} served "
                f"({stats.near_verified} verified by a fetch), under a disagreement bound of at "
                f"most {stats.near_served_bound:.2%} at 95%"
            )
    if not args.html:
        return True
    from .html import write_report

    try:
        write_report(result, args.html)
    except OSError as error:
        reason = error.strerror or error
        print(f"wm-middleware demo: cannot write {args.html} ({reason})", file=sys.stderr)
        return False
    progress_console.print(f"[dim]HTML report written to {args.html}[/dim]")
    return True


def _outcome(result: Any, requested: str | None) -> int:
    """What went wrong, after the report (what the collector missed, failed tool calls)."""
    from .report import export_report, plural

    delivery = export_report(result, requested)
    if delivery:
        print(f"wm-middleware demo: {delivery}", file=sys.stderr)
    errors = result.uncached.agent.errors + result.cached.agent.errors
    if errors:
        print(
            f"wm-middleware demo: {plural(len(errors), 'tool call')} failed, "
            f"first: {errors[0].error}",
            file=sys.stderr,
        )
        return 1
    return 0


DEMO = Command(
    "demo",
    help="run a scripted agent uncached and cached, and compare",
    description=(
        "Start the emulator, seed a small memory set, and run a scripted agent loop "
        "(supermemory-openai-sdk SupermemoryTools executing an LLM's tool calls; no LLM or "
        "key needed) twice: uncached and with wm_middleware.instrument(). Prints upstream "
        "requests, per-search latency, wall time per turn and a trace waterfall."
    ),
    options=(
        ("--turns", {"type": positive_int, "default": 4, "help": "agent turns (default 4)"}),
        (
            "--latency-ms",
            {
                "type": latency_ms,
                "default": 100.0,
                "help": "emulated upstream latency per request, +-20%% jitter (default 100)",
            },
        ),
        (
            "--indexing-delay",
            {
                "type": seconds(3600),
                "metavar": "SECONDS",
                "help": "seconds the emulator takes to index a written memory before search "
                "returns it (default 2, as Supermemory takes seconds for a short text; 0 with "
                "--workers)",
            },
        ),
        ("--json", {"action": "store_true", "help": "print a machine-readable summary only"}),
        (
            "--otlp-endpoint",
            {
                "type": _http_url,
                "metavar": "URL",
                "help": "export both runs over OTLP (e.g. http://localhost:4318, or :4317 with "
                "grpc); default: the OTEL_EXPORTER_OTLP_ENDPOINT environment variable, if set",
            },
        ),
        (
            "--otlp-protocol",
            {
                "choices": ["grpc", "http/protobuf"],
                "help": "OTLP protocol (default: OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf)",
            },
        ),
        (
            "--duration",
            {
                "type": _duration,
                "metavar": "TIME",
                "help": "with an OTLP endpoint: keep both deployments running side by side this "
                "long (e.g. 2m), replaying the script, so that dashboard rate() and increase() "
                "panels fill; the report shows the first round (also after Ctrl-C)",
            },
        ),
        (
            "--html",
            {
                "metavar": "FILE",
                "help": "also write a self-contained HTML report (latency distributions, "
                "requests saved per turn, the waterfall of every cached turn)",
            },
        ),
        (
            "--api-key",
            {
                "help": "run against the real Supermemory API with this key (instead of the "
                "emulator); SUPERMEMORY_BASE_URL, when set, names the API"
            },
        ),
        (
            "--base-url",
            {
                "type": _http_url,
                "metavar": "URL",
                "help": "Supermemory API base URL (with --api-key or SUPERMEMORY_API_KEY)",
            },
        ),
        (
            "--semantic",
            {
                "choices": ["off", "shadow", "serve"],
                "help": "shadow: the cached run compares each miss with the nearest cached query "
                "and prints what serving near-duplicates would have saved and risked; serve: "
                "also serves them once the evidence bounds disagreement at 1%%, and prints the "
                "near hits served and verified",
            },
        ),
        (
            "--workers",
            {
                "type": positive_int,
                "metavar": "N",
                "help": "run the agent loop in N worker processes, local-only then with a shared "
                "tier on Redis / Valkey, and compare upstream requests and wall time (emulator "
                "only)",
            },
        ),
        (
            "--redis-url",
            {
                "type": _redis_url,
                "metavar": "URL",
                "help": "with --workers: the Redis / Valkey server of the shared tier (default: "
                "an embedded valkey-server for the demo)",
            },
        ),
    ),
    run=_run,
)
