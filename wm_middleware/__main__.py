"""``wm-middleware`` (also ``python -m wm_middleware``): the demo and the emulator server.

``wm-middleware demo`` runs a scripted agent through supermemory-openai-sdk's ``SupermemoryTools``
against the bundled emulator twice, uncached and with ``instrument()``, then prints the
comparison and a trace waterfall; it needs the ``demo`` extra. ``wm-middleware demo --workers N``
runs it in N processes instead, local-only then with a shared tier on Redis / Valkey, and compares
the two. ``wm-middleware serve`` runs the emulator in the foreground; it needs the ``server``
extra.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from .version import __version__

__all__ = ["main"]

# The exit status of a process stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130


_Number = TypeVar("_Number", int, float)


def _number(
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


_positive_int = _number(int, "a whole number", 1, math.inf, "must be at least 1, got {value}")
_latency = _number(
    float, "milliseconds", 0, 10_000, "must be between 0 and 10000 ms, got {value:g}"
)
_indexing_delay = _number(
    float, "seconds", 0, 24 * 3600, "must be between 0 and 86400 s, got {text!r}"
)
_seconds = _number(float, "seconds", 0, 3600, "must be between 0 and 3600 s, got {value:g}")
_port = _number(int, "a port number", 0, 65535, "must be between 0 and 65535, got {value}")


def _duration(text: str) -> float:
    """``90``, ``90s``, ``2m`` or ``1h`` -> seconds."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        value = float(number) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 90s, 2m or 1h, got {text!r}"
        ) from None
    if not 1 <= value <= 24 * 3600:
        raise argparse.ArgumentTypeError(f"must be between 1s and 24h, got {text!r}")
    return value


def _http_url(text: str) -> str:
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
    value = text.strip()
    if not value.startswith(("redis://", "rediss://", "unix://")):
        raise argparse.ArgumentTypeError(
            f"expected a URL starting with redis://, rediss:// or unix://, got {text!r}"
        )
    return value


@dataclass(frozen=True)
class _Command:
    """A subcommand: its line in the top-level help, its own description and its options, each
    an ``add_argument`` call (flag, keywords) in the order its ``--help`` lists them."""

    name: str
    help: str
    description: str
    options: tuple[tuple[str, dict[str, Any]], ...]


_DEMO = _Command(
    "demo",
    help="run a scripted agent uncached and cached, and compare",
    description=(
        "Start the emulator, seed a small memory set, and run a scripted agent loop "
        "(supermemory-openai-sdk SupermemoryTools executing an LLM's tool calls; no LLM or "
        "key needed) twice: uncached and with wm_middleware.instrument(). Prints upstream "
        "requests, per-search latency, wall time per turn and a trace waterfall."
    ),
    options=(
        ("--turns", {"type": _positive_int, "default": 4, "help": "agent turns (default 4)"}),
        (
            "--latency-ms",
            {
                "type": _latency,
                "default": 100.0,
                "help": "emulated upstream latency per request, +-20%% jitter (default 100)",
            },
        ),
        (
            "--indexing-delay",
            {
                "type": _seconds,
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
                "panels fill; the report shows the first round",
            },
        ),
        (
            "--html",
            {
                "metavar": "FILE",
                "help": "also write a self-contained HTML report (latency distributions, "
                "requests saved per turn, the waterfall of one cached turn)",
            },
        ),
        (
            "--api-key",
            {
                "help": "run against the real Supermemory API with this key (instead of the "
                "emulator)"
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
                "choices": ["off", "shadow"],
                "help": "shadow: the cached run compares each miss with the nearest cached query "
                "and prints what serving near-duplicates would have saved and risked",
            },
        ),
        (
            "--workers",
            {
                "type": _positive_int,
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
)

_SERVE = _Command(
    "serve",
    help="run the Supermemory API emulator in the foreground",
    description="Run the Supermemory-compatible emulator until interrupted (Ctrl-C).",
    options=(
        ("--host", {"default": "127.0.0.1", "help": "interface (default 127.0.0.1)"}),
        ("--port", {"type": _port, "default": 8787, "help": "port (default 8787)"}),
        (
            "--latency-ms",
            {"type": _latency, "default": 0.0, "help": "latency per request (default 0)"},
        ),
        (
            "--indexing-delay",
            {
                "type": _indexing_delay,
                "default": 0.0,
                "metavar": "SECONDS",
                "help": "seconds from a write until search, profile and the lists see it; "
                "documents report queued, extracting, chunking, embedding, indexing, then done "
                "(default 0)",
            },
        ),
        (
            "--demo-data",
            {
                "action": "store_true",
                "help": "seed the demo's memory set (API key sk-wm-demo, container tag user-alex)",
            },
        ),
        ("--log-level", {"default": "info", "choices": ["debug", "info", "warning", "error"]}),
    ),
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wm-middleware",
        description="Working memory for AI agents in front of Supermemory: demo and emulator.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (_DEMO, _SERVE):
        subparser = commands.add_parser(
            command.name, help=command.help, description=command.description
        )
        for flag, keywords in command.options:
            subparser.add_argument(flag, **keywords)
        # main() reports a mistake with the usage of the command it belongs to.
        subparser.set_defaults(command_parser=subparser)
    return parser


def _supermemory_major() -> int | None:
    """The major version of the installed ``supermemory`` SDK (``None``: not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version("supermemory").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return None


def _missing_extra(error: ImportError, extra: str) -> int:
    """One line naming what is missing and an install that fits this environment.

    The demo's extra pins supermemory 3.x (its integration, supermemory-openai-sdk, needs
    ``supermemory<5``): in a 5.x environment, installing it would downgrade the SDK the
    application uses, so the line says to give the demo an environment of its own instead.
    """
    missing = error.name or error
    major = _supermemory_major() if extra == "demo" else None
    if major is not None and major >= 5:
        print(
            f"wm-middleware: {missing} is not installed; the demo needs supermemory 3.x and this "
            f"environment has supermemory {major}.x, which pip install 'wm-middleware[demo]' "
            "would downgrade: give the demo an environment of its own (python3 -m venv "
            ".venv-demo && .venv-demo/bin/python -m pip install 'wm-middleware[demo]', or "
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


def _otlp_requested(args: argparse.Namespace) -> bool:
    """Whether an OTLP endpoint is asked for: ``--otlp-endpoint`` or the standard variables."""
    names = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    return bool(args.otlp_endpoint) or any(os.environ.get(name, "").strip() for name in names)


# Options of the two-run demo that a --workers run has no use for.
_NOT_WITH_WORKERS = ("api_key", "base_url", "otlp_endpoint", "duration", "html")


def _demo_fleet(args: argparse.Namespace) -> int:
    """``demo --workers N``: local-only vs shared across N processes; one line on an error."""
    try:
        from rich.console import Console

        from .demo.fleet import (
            FleetOptions,
            fleet_saved_line,
            fleet_summary,
            fleet_table,
            run_fleet,
        )
        from .demo.runner import DemoError
    except ImportError as error:
        return _missing_extra(error, "demo")
    options = FleetOptions(
        args.workers, args.turns, args.latency_ms, args.redis_url, args.indexing_delay or 0.0
    )
    out = Console(highlight=False)
    out.soft_wrap = not out.is_terminal
    if not args.json:
        out.print(
            f"wm-middleware demo: a scripted agent in {args.workers} worker processes, "
            f"{args.turns} turns each against the emulator ({args.latency_ms:g} ms latency), "
            "local-only then with a shared tier"
        )

    def started(mode: str) -> None:
        if not args.json:
            label = "local only" if mode == "local" else "shared tier"
            out.print(f"  {label}: {args.workers} worker processes started, playing the script")

    try:
        result = run_fleet(options, started)
    except ImportError as error:
        return _missing_extra(error, "demo")
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
        print(f"wm-middleware demo: {failed} tool calls failed", file=sys.stderr)
        return 1
    return 0


def _export_settings(args: argparse.Namespace, notes: list[str]) -> dict[str, Any]:
    """The OTLP settings of the run after checking the collector with real exports: a
    collector that refuses traces means no export at all, one that refuses metrics (a
    traces-only backend) means traces only; each said once, in ``notes``.

    Raises:
        ValueError: an unsupported OTLP protocol.
    """
    from .demo.runner import check_collector, check_metrics, otlp_target

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


def _demo(args: argparse.Namespace) -> int:
    if args.workers is not None:
        return _demo_fleet(args)
    try:
        from rich.console import Console

        from .demo.console import ConsoleProgress
        from .demo.runner import DemoError, DemoOptions, otlp_target, run_demo
    except ImportError as error:
        return _missing_extra(error, "demo")

    out = Console(highlight=False)
    err = Console(stderr=True, highlight=False)
    for console in (out, err):
        # In a log or a pipe, a sentence stays on one line instead of breaking at 80 columns.
        console.soft_wrap = not console.is_terminal
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
        target = (
            f"the emulator ({args.latency_ms:g} ms latency, {options.indexing_delay:g} s indexing)"
            if options.uses_emulator
            else (options.base_url or "the Supermemory API")
        )
        out.print(
            f"wm-middleware demo: a scripted agent (SupermemoryTools), {args.turns} turns "
            f"against {target}, uncached then cached"
        )
    for note in notes:
        progress_console.print(f"[dim]{note}[/dim]")
    try:
        result = asyncio.run(run_demo(options, progress))
    except ImportError as error:
        return _missing_extra(error, "demo")
    except DemoError as error:
        print(f"wm-middleware demo: {error}", file=sys.stderr)
        return 1
    _report(args, result, out, progress_console)
    return _outcome(result, otlp_target(args.otlp_endpoint)[0])


def _report(args: argparse.Namespace, result: Any, out: Any, progress_console: Any) -> None:
    """The demo's report: JSON, or the table, the headline lines and the waterfall."""
    from .demo.report import (
        LATENCY_NOTE,
        comparison_table,
        first_seen_line,
        saved_line,
        summary,
        waterfall,
    )

    if args.html:
        from .demo.html import write_report

        write_report(result, args.html)
    if args.json:
        print(json.dumps(summary(result), indent=2))
    else:
        out.print()
        out.print(comparison_table(result))
        out.print(f"[dim]{LATENCY_NOTE}[/dim]")
        out.print()
        out.print(saved_line(result))
        seen = first_seen_line(result)
        if seen is not None:
            out.print(seen)
        out.print()
        out.print(waterfall(result, out))
        if args.semantic == "shadow":
            from .semantic import report

            out.print(f"near-duplicates, cached run: {report(result.cached.stats)}")
    if args.html:
        progress_console.print(f"[dim]HTML report written to {args.html}[/dim]")


def _outcome(result: Any, requested: str | None) -> int:
    """What went wrong, after the report (what the collector missed, failed tool calls)."""
    from .demo.report import export_report

    delivery = export_report(result, requested)
    if delivery:
        print(f"wm-middleware demo: {delivery}", file=sys.stderr)
    errors = result.uncached.agent.errors + result.cached.agent.errors
    if errors:
        print(
            f"wm-middleware demo: {len(errors)} tool calls failed, first: {errors[0].error}",
            file=sys.stderr,
        )
        return 1
    return 0


def _serve(args: argparse.Namespace) -> int:
    try:
        from .emulator import serve
    except ImportError as error:
        return _missing_extra(error, "server")
    seed_data: dict[str, Any] | None = None
    if args.demo_data:
        from .demo.script import CONTAINER_TAG, SEED_MEMORIES

        seed_data = {
            "sk-wm-demo": [dict(memory, container_tag=CONTAINER_TAG) for memory in SEED_MEMORIES]
        }

    def listening(base_url: str) -> None:
        print(
            f"wm-middleware: emulator on {base_url} (open it for the controls; Ctrl-C stops)",
            flush=True,
        )

    try:
        serve(
            args.host,
            args.port,
            latency=args.latency_ms / 1000.0 or None,
            indexing_delay=args.indexing_delay,
            seed_data=seed_data,
            log_level=args.log_level,
            on_listening=listening,
        )
    except OSError as error:
        print(
            f"wm-middleware serve: cannot listen on {args.host}:{args.port}: "
            f"{error.strerror or error}; choose another --port or --host",
            file=sys.stderr,
        )
        return 1
    except KeyboardInterrupt:
        pass  # Ctrl-C is how serve is meant to stop
    return 0


def _demo_mistake(args: argparse.Namespace) -> str | None:
    """The first pair of demo options that do not go together, as its usage error says it."""
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
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``wm-middleware`` console script; returns the exit status.

    A mistake in the arguments is one usage line and status 2 (argparse's), an unreachable or
    refusing target one line and status 1, Ctrl-C one line and status 130.
    """
    args, unknown = _parser().parse_known_args(argv)
    command_parser: argparse.ArgumentParser = args.command_parser
    if unknown:  # reported with the command's usage, not the top-level one
        command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        if args.command == "demo":
            mistake = _demo_mistake(args)
            if mistake is not None:
                command_parser.error(mistake)
            return _demo(args)
        return _serve(args)
    except KeyboardInterrupt:
        print(f"wm-middleware {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
