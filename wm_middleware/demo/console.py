"""Progress display: a rich progress bar on a terminal, one plain line per turn elsewhere (CI)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

from .agent import AgentRun, CallRecord, TurnRecord
from .runner import Progress

__all__ = ["ConsoleProgress"]


class ConsoleProgress(Progress):
    """Shows each run's progress on ``console`` (nothing when ``quiet``)."""

    def __init__(self, console: Console, *, quiet: bool = False) -> None:
        self.console = console
        self.quiet = quiet
        self.live = console.is_terminal and not quiet
        self._bar: RichProgress | None = None
        self._task: TaskID | None = None
        self._name = ""

    def start(self, name: str, total_calls: int) -> None:
        self._name = name
        if not self.live:
            return
        self._bar = RichProgress(
            TextColumn(f"{name:<9}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("tool calls"),
            TimeElapsedColumn(),
            console=self.console,
        )
        self._task = self._bar.add_task(name, total=total_calls)
        self._bar.start()

    def call(self, record: CallRecord) -> None:
        if self._bar is not None and self._task is not None:
            self._bar.advance(self._task)

    def turn(self, record: TurnRecord) -> None:
        if self.live or self.quiet:
            return
        upstream = "" if record.upstream is None else f", {record.upstream} upstream requests"
        self.console.print(
            f"  {self._name:<9} turn {record.index} ({record.title}): "
            f"{record.seconds * 1000:.0f} ms{upstream}"
        )

    def finish(self, name: str, run: AgentRun) -> None:
        self.close()

    def close(self) -> None:
        """Stop the bar, if one is running (Ctrl-C or an error mid-run): it is drawn once more
        and the cursor goes to the next line, so that nothing redraws after the last line."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
            self._task = None
