"""The evidence that decides whether near-duplicates are served: verdicts by configuration.

A **configuration** is what makes a candidate: the form (the lexical form, or an embedder named
by its module and qualified name), the vetoes by name, and the **similarity band** of the
candidate (:data:`BANDS`: ``1`` for equal lexical forms or identical vectors, then ``[0.99, 1)``,
``[0.98, 0.99)``...). Every compared miss and every verification of a served near hit is one
verdict, agreed or disagreed, of the configuration its candidate was found in. A candidate is
served only while the one-sided 95% Clopper-Pearson upper bound on disagreement of its
configuration is at most ``max_error``; a disagreement counts at once, so the next decision
sees it.

With a shared tier that pools evidence (``RedisTier.evidence()``) the verdicts of every process
count: each process stores the totals of its own verdicts (never increments, so a retried or
repeated store counts them once), and reads the others'. Both happen off the read path, in one
thread per process woken by a new verdict or by a decision that finds the fleet's counts older
than :data:`_PULL_EVERY`; nothing is polled on a timer. Without such a tier the evidence is this
process's alone.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    from ..semantic import SemanticReuse

__all__ = ["BANDS", "Evidence", "EvidenceBoard", "band_of", "family_of"]

logger = logging.getLogger("wm_middleware")

BANDS: Final = (1.0, 0.99, 0.98, 0.95, 0.9, 0.8, 0.5, 0.0)
"""Lower edges of the similarity bands, highest first: a similarity is in the first band whose
edge it reaches."""

_PULL_EVERY: Final = 1.0  # seconds a decision trusts the fleet's counts before asking again
_IDLE: Final = 30.0  # seconds the sync thread sleeps before it looks whether it is still needed

Counts = tuple[int, int]  # (agreed, disagreed)


class EvidenceBoard(Protocol):
    """The fleet's verdicts of one configuration family (a shared tier's ``evidence(family)``)."""

    def exchange(self, own: Mapping[str, Counts]) -> dict[str, Counts]:
        """Store this process's totals by band (``own``, possibly empty) and return the other
        processes' totals by band. Raises on a tier error."""
        ...


def band_of(similarity: float) -> str:
    """The name of the similarity band of ``similarity`` (its lower edge, ``1`` for 1.0)."""
    edge = next((edge for edge in BANDS if similarity >= edge), 0.0)
    return f"{edge:g}"


def family_of(semantic: SemanticReuse) -> str:
    """The configuration without its band: the form and the vetoes, the same in every process
    that runs the same code (an embedder by its module and qualified name)."""
    embed = semantic.embed
    if embed is None:
        form = "lexical"
    else:
        name = getattr(embed, "__qualname__", type(embed).__qualname__)
        form = f"embed:{getattr(embed, '__module__', '?')}.{name}"
    vetoes = ",".join(veto.name for veto in semantic.vetoes) or "none"
    return f"{form}|vetoes:{vetoes}"


@functools.lru_cache(maxsize=4096)
def _bound(failures: int, trials: int) -> float:
    from ..semantic import upper_bound

    return upper_bound(failures, trials)


class Evidence:
    """The verdicts of one runtime's serve mode, by band of its configuration family.

    ``_lock`` guards ``_own``, ``_others``, ``_dirty`` and ``_pulled``; the board's I/O runs
    in the sync thread, outside it.
    """

    def __init__(self, family: str, max_error: float, board: EvidenceBoard | None) -> None:
        self.family = family
        self.max_error = max_error
        self._board = board
        self._lock = threading.Lock()
        self._own: dict[str, list[int]] = {}  # band -> [agreed, disagreed] of this process
        self._others: dict[str, Counts] = {}  # band -> the other processes' totals
        self._dirty = False  # verdicts not stored on the board yet
        self._pulled = -float("inf")  # monotonic time the board was last asked
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = -1
        self._logged = False

    # -- decisions ------------------------------------------------------------------------------
    def counts(self, band: str) -> Counts:
        """``(agreed, disagreed)`` of ``band``: this process's and, pooled, the fleet's."""
        self._freshen()
        with self._lock:
            mine = self._own.get(band, [0, 0])
            theirs = self._others.get(band, (0, 0))
            return mine[0] + theirs[0], mine[1] + theirs[1]

    def bound(self, band: str) -> float:
        """The 95% upper bound on disagreement of ``band`` now (1.0 with no verdicts)."""
        agreed, disagreed = self.counts(band)
        return _bound(disagreed, agreed + disagreed)

    def allows(self, band: str) -> tuple[bool, float]:
        """Whether a candidate of ``band`` may be served now, and the bound that says so."""
        bound = self.bound(band)
        return bound <= self.max_error, bound

    def open(self) -> bool:
        """Whether any band may serve now (else a miss need not wait for its vector)."""
        self._freshen()
        with self._lock:
            bands = set(self._own) | set(self._others)
        return any(self.allows(band)[0] for band in bands)

    # -- verdicts -------------------------------------------------------------------------------
    def record(self, band: str, agreed: bool) -> None:
        """One verdict of ``band``: counted here at once, stored on the board off the path."""
        with self._lock:
            counts = self._own.setdefault(band, [0, 0])
            counts[0 if agreed else 1] += 1
            self._dirty = True
        if self._board is not None:
            self._kick()

    # -- the board ------------------------------------------------------------------------------
    def _freshen(self) -> None:
        """Wake the sync thread when the fleet's counts are older than :data:`_PULL_EVERY`."""
        if self._board is not None and time.monotonic() - self._pulled >= _PULL_EVERY:
            self._kick()

    def _kick(self) -> None:
        if self._pid != os.getpid():  # first use, or a forked child: its own thread
            with self._lock:
                if self._pid != os.getpid():
                    self._pid = os.getpid()
                    self._wake = threading.Event()
                    self._thread = threading.Thread(
                        target=_sync,
                        args=(weakref.ref(self), self._wake),
                        name="wm-near-evidence",
                        daemon=True,
                    )
                    self._thread.start()
        self._wake.set()

    def sync_now(self) -> bool:
        """Exchange with the board now (in the calling thread); False: no board, or it failed."""
        board = self._board
        if board is None:
            return False
        with self._lock:
            own = {band: (c[0], c[1]) for band, c in self._own.items()} if self._dirty else {}
            self._dirty = False
            self._pulled = time.monotonic()
        try:
            others = board.exchange(own)
        except Exception as error:
            with self._lock:
                self._dirty = self._dirty or bool(own)
            if not self._logged:
                self._logged = True
                logger.warning(
                    "wm_middleware: the fleet's near-duplicate evidence could not be reached "
                    "(%s); this process decides on its own verdicts until it can",
                    type(error).__name__,
                )
            return False
        with self._lock:
            self._others = others
        return True


def _sync(evidence: weakref.ref[Evidence], wake: threading.Event) -> None:
    """The sync thread: each wake-up stores this process's totals and reads the others'. It
    holds its evidence weakly and ends once the runtime that made it is gone."""
    while True:
        woken = wake.wait(_IDLE)
        found = evidence()
        if found is None:
            return
        if woken:
            wake.clear()
            found.sync_now()
        del found
