"""``wm-middleware`` (also ``python -m wm_middleware``): the demo and the emulator server.

``wm-middleware demo`` runs a scripted agent through supermemory-openai-sdk's ``SupermemoryTools``
against the bundled emulator twice, uncached and with ``instrument()``, then prints the
comparison and a trace waterfall; it needs the ``demo`` extra (see :mod:`wm_middleware.demo.cli`).
``wm-middleware serve`` runs the emulator in the foreground; it needs the ``server`` extra.

This module only builds the parser from the two commands' tables and dispatches.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from .demo.cli import DEMO, INTERRUPTED, Command, latency_ms, missing_extra, number, seconds
from .version import __version__

__all__ = ["main"]


def _serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        from .emulator import serve
    except ImportError as error:
        return missing_extra(error, "server")
    seed_data: dict[str, Any] | None = None
    if args.demo_data:
        from .demo.script import CONTAINER_TAG, DEMO_API_KEY, SEED_MEMORIES

        seed_data = {
            DEMO_API_KEY: [dict(memory, container_tag=CONTAINER_TAG) for memory in SEED_MEMORIES]
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


SERVE = Command(
    "serve",
    help="run the Supermemory API emulator in the foreground",
    description="Run the Supermemory-compatible emulator until interrupted (Ctrl-C).",
    options=(
        ("--host", {"default": "127.0.0.1", "help": "interface (default 127.0.0.1)"}),
        (
            "--port",
            {
                "type": number(
                    int, "a port number", 0, 65535, "must be between 0 and 65535, got {value}"
                ),
                "default": 8787,
                "help": "port (default 8787)",
            },
        ),
        (
            "--latency-ms",
            {
                "type": latency_ms,
                "default": 0.0,
                "help": "latency per request (default 0)",
            },
        ),
        (
            "--indexing-delay",
            {
                "type": seconds(24 * 3600),
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
    run=_serve,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="wm-middleware",
        description="Working memory for AI agents in front of Supermemory: demo and emulator.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (DEMO, SERVE):
        subparser = commands.add_parser(
            command.name, help=command.help, description=command.description
        )
        for flag, keywords in command.options:
            subparser.add_argument(flag, **keywords)
        # A mistake is reported with the usage of the command it belongs to.
        subparser.set_defaults(command_parser=subparser, command_run=command.run)
    return parser


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
        status: int = args.command_run(args, command_parser)
    except KeyboardInterrupt:
        print(f"wm-middleware {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    return status


if __name__ == "__main__":
    sys.exit(main())
