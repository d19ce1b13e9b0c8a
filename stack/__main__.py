"""``python3 -m stack``: the observability stack on loopback, without Docker, until Ctrl-C.

``python3 -m stack build`` only builds (or finds in the cache) the collector and Jaeger and says
where they are and how long that took.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from .programs import COLLECTOR, JAEGER, PROGRAMS, Built, GoNotFound, build_all
from .queries import MONITOR_KIND, MONITOR_OPERATION, p95_graph_url
from .services import Ports, Stack, StackError, prometheus_binary, running


def _built_line(built: Built) -> str:
    how = "from the cache" if built.cached else f"built in {built.seconds:.0f} s"
    return f"{built.program.name} {built.program.release}: {built.path} ({how})"


def _links(stack: Stack) -> str:
    monitor = (
        f"{stack.jaeger}/api/metrics/latencies?service=agent-cached&service=agent-uncached"
        f"&quantile=0.95&spanKind={MONITOR_KIND}&groupByOperation=true"
    )
    return "\n".join(
        [
            f"  OTLP in:     {stack.otlp_http} (http/protobuf), {stack.otlp_grpc} (grpc)",
            f"  traces:      {stack.jaeger}/api/traces?service=agent-cached&limit=20",
            f"  Monitor API: {monitor}",
            f"               (operation {MONITOR_OPERATION!r}, span kind {MONITOR_KIND})",
            f"  p95 graph:   {p95_graph_url(stack.prometheus)}",
            f"  try:         wm-middleware demo --otlp-endpoint {stack.otlp_http} --duration 2m",
            "Ctrl-C stops all three.",
        ]
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python3 -m stack",
        description="The collector and Jaeger built from Go modules, Prometheus from the "
        "system's package, on loopback: the compose file's stack without Docker.",
    )
    parser.add_argument("command", nargs="?", choices=["run", "build"], default="run")
    defaults = {"otlp-grpc": 4317, "otlp-http": 4318, "jaeger": 16686, "prometheus": 9090}
    for name, port in defaults.items():
        parser.add_argument(f"--{name}", type=int, default=port, metavar="PORT")
    parser.add_argument("--keep", action="store_true", help="keep the logs' directory")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            prometheus_binary()  # before a build that may take minutes
        print(f"building {', '.join(p.name for p in PROGRAMS)} (cached after the first time)")
        built = build_all()
    except (GoNotFound, FileNotFoundError) as error:
        print(f"python3 -m stack: {error}", file=sys.stderr)
        return 1
    for line in map(_built_line, built.values()):
        print(f"  {line}")
    if args.command == "build":
        return 0
    ports = Ports.choose(
        otlp_grpc=args.otlp_grpc,
        otlp_http=args.otlp_http,
        jaeger=args.jaeger,
        prometheus=args.prometheus,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with running(
            built[COLLECTOR.name].path, built[JAEGER.name].path, ports, keep=args.keep
        ) as stack:
            print(f"running (logs in {stack.workdir}):\n{_links(stack)}", flush=True)
            try:
                stop.wait()
            except KeyboardInterrupt:
                pass
    except StackError as error:
        print(f"python3 -m stack: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # while starting: what had started is stopped and removed
        return 130
    if args.keep:
        print(f"logs kept in {Path(stack.workdir)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
