"""What the ratio benchmarks (``bench_core.py``, ``bench_sdk.py``) share: the rows they print,
the interleaved rounds they measure in, their command line and their report.

The benchmarks are scripts run from the repository root (``python benchmarks/bench_core.py``);
each puts the checkout first on ``sys.path`` before importing this module as
``benchmarks._common``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass
class Row:
    """One printed line. ``ratio`` is against the section's baseline; ``goal`` bounds it (or,
    on a row without a ratio, the value itself)."""

    section: str
    label: str
    value: float
    unit: str  # "ns" per call, "ns/waiter", "B/entry"
    ratio: float | None = None
    goal: float | None = None
    note: str = ""

    @property
    def result(self) -> str:
        if self.goal is None:
            return ""
        measured = self.value if self.ratio is None else self.ratio
        return "PASS" if measured <= self.goal else "MISS"


def rotated(names: Sequence[str], rounds: int) -> Iterator[list[str]]:
    """The order of each of ``rounds`` rounds: every name once, rotated by one from round to
    round, so that drift in machine load hits every candidate alike."""
    for round_ in range(rounds):
        shift = round_ % len(names)
        yield [*names[shift:], *names[:shift]]


def parse_arguments(doc: str | None, argv: Sequence[str] | None, quick: str) -> argparse.Namespace:
    """``--quick`` (described by ``quick``) and ``--json PATH``; the description is the first
    line of the benchmark's ``doc``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the rows as JSON")
    return parser.parse_args(argv)


def format_rows(rows: Sequence[Row], *, label_width: int, ratio_digits: int) -> str:
    """The rows as a table, a header above each section."""
    lines: list[str] = []
    header = f"{'':{label_width + 2}} {'measured':>13} {'ratio':>8} {'goal':>8}  result  note"
    section = ""
    for row in rows:
        if row.section != section:
            section = row.section
            lines += ["", section, header]
        measured = f"{row.value:,.0f} {row.unit}"
        ratio = "" if row.ratio is None else f"{row.ratio:.{ratio_digits}f}x"
        if row.goal is None:
            goal = ""
        elif row.ratio is None:
            goal = f"<= {row.goal:.0f}"
        else:
            goal = f"<= {row.goal:g}x"
        lines.append(
            f"  {row.label:<{label_width}} {measured:>13} {ratio:>8} {goal:>8}  "
            f"{row.result:<6}  {row.note}"
        )
    return "\n".join(lines)


def report(
    rows: Sequence[Row],
    *,
    arguments: argparse.Namespace,
    config: Any,
    seconds: float,
    label_width: int,
    ratio_digits: int,
) -> None:
    """Print the table and how many goals were met; with ``--json``, write the rows too."""
    print(format_rows(rows, label_width=label_width, ratio_digits=ratio_digits))
    met = sum(row.result == "PASS" for row in rows)
    missed = sum(row.result == "MISS" for row in rows)
    print(f"\n{met} goals met, {missed} missed ({seconds:.0f} s)")
    if arguments.json is not None:
        payload = {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "quick": arguments.quick,
            "config": asdict(config),
            "seconds": round(seconds, 1),
            "rows": [asdict(row) | {"result": row.result} for row in rows],
        }
        arguments.json.write_text(json.dumps(payload, indent=2) + "\n")
