"""Serve mode: a miss answered with a near-duplicate's entry while the evidence allows it.

Before a miss's fetch (:meth:`Serving.serve`, :meth:`Serving.aserve`), the shadow mode's
candidate is looked for: the nearest live cached query of the read's partition above the
threshold that every veto lets through. It is served (a **near hit**) only when all of these
hold, else the miss fetches and is compared as in shadow mode:

* the evidence of its configuration (:mod:`.evidence`: the form, the vetoes and the candidate's
  similarity band) bounds disagreement at or below ``max_error`` now;
* neither the read's scopes nor the candidate's settle after a write (an entry a write
  invalidated is gone from the memory already: it is never a candidate);
* the candidate's entry is live: its value is read once, and that is what is served, decoded
  for the caller as a hit of it would be. Nothing is stored for the near hit's own key.

A share of near hits (``verify_share``: the first, then one in every ``1 / verify_share``) is
**verified**: the read's own fetch runs anyway, beside the caller (a thread, or a task of the
caller's event loop), and the two answers' record ids are compared by the shadow mode's rule.
The verdict counts at once, so one disagreement can close the band for the next miss. The
budget holds: a verified near hit makes the one request its read would have made uncached,
and only a near hit that makes none earns the freshness ledger its credit, so requests stay at
or below those of the same calls uncached.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import threading
from collections.abc import Awaitable, Callable
from concurrent import futures
from typing import TYPE_CHECKING, Any, NamedTuple

from .._core import MISSING
from .._telemetry.names import NEAR_BOUND, NEAR_SIMILARITY, NEAR_VERIFY
from .answers import agree, ids_of
from .evidence import Evidence, band_of, family_of
from .shadow import Candidate, failure
from .text import Words

if TYPE_CHECKING:
    from .._calls import Read
    from .._core import WorkingMemory
    from .._freshness import Freshness
    from .._telemetry import ReadObservation
    from .shadow import Pending, Shadow

__all__ = ["NearHit", "Serving"]


class NearHit(NamedTuple):
    """A near hit decided: the candidate, its band, the bound it is served under, whether it is
    verified, and the record ids served (for the verification)."""

    candidate: Candidate
    band: str
    bound: float
    verify: bool
    ids: tuple[str, ...] | None


class Serving:
    """The serve mode of one runtime's shadow: decisions, near hits and their verifications.

    ``_lock`` guards ``_served`` (near hits counted for ``verify_share``); ``_tasks`` holds the
    verification tasks of event loops until they end.
    """

    def __init__(self, shadow: Shadow, memory: WorkingMemory[Any], freshness: Freshness) -> None:
        semantic = shadow.semantic
        self._shadow = shadow
        self._memory = memory
        self._freshness = freshness
        self._share = semantic.verify_share
        evidence = getattr(memory.shared, "evidence", None)
        board = None
        if evidence is not None:
            try:
                board = evidence(family_of(semantic))
            except Exception:  # a tier that cannot pool: this process's verdicts alone
                board = None
        self.evidence = Evidence(family_of(semantic), semantic.max_error, board)
        self._lock = threading.Lock()
        self._served = 0
        self._verifying = 0  # verifications under way
        self._tasks: set[asyncio.Task[None]] = set()
        shadow.on_verdict = self.judged  # each miss's comparison is a verdict too

    @property
    def verifying(self) -> int:
        """Verifications started and not yet ended."""
        return self._verifying

    def judged(self, similarity: float, agreed: bool) -> None:
        """A miss's comparison found its candidate (of ``similarity``) agreed or not."""
        self.evidence.record(band_of(similarity), agreed)

    # -- a miss -------------------------------------------------------------------------------
    def serve(
        self, pending: Pending, read: Read, observation: ReadObservation, fetch: Callable[[], Any]
    ) -> Any:
        """Before the fetch of a miss: its near hit's value, or :data:`MISSING` (fetch).
        ``fetch`` is the read's own, for a verification (run in a thread of its own)."""
        if not self._open(read):
            return MISSING
        futures.wait((pending.vector,), timeout=self._shadow.semantic.timeout)
        hit = self._decided(pending, read)
        if hit is None:
            return MISSING
        if hit.verify:  # in the caller's context: its request is traced where the read is
            self._started()
            context = contextvars.copy_context()
            threading.Thread(
                target=context.run, args=(self._verify, hit, fetch, read.decode),
                name="wm-near-verify", daemon=True,
            ).start()  # fmt: skip
        return self._served_now(hit, read, observation)

    async def aserve(
        self,
        pending: Pending,
        read: Read,
        observation: ReadObservation,
        fetch: Callable[[], Awaitable[Any]],
    ) -> Any:
        """Async :meth:`serve`: the wait for the vector does not block the loop, and a
        verification is a task of the caller's loop."""
        if not self._open(read):
            return MISSING
        if not pending.vector.done():
            from .shadow import _waited

            await _waited(pending.vector, self._shadow.semantic.timeout)
        hit = self._decided(pending, read)
        if hit is None:
            return MISSING
        if hit.verify:
            self._started()
            task = asyncio.get_running_loop().create_task(self._averify(hit, fetch, read.decode))
            self._tasks.add(task)
            task.add_done_callback(self._done)
        return self._served_now(hit, read, observation)

    # -- the steps ------------------------------------------------------------------------------
    def _open(self, read: Read) -> bool:
        """Whether a near hit is possible at all (else the miss need not wait for its vector)."""
        return self.evidence.open() and not self._freshness.settling(read.scopes)

    def _decided(self, pending: Pending, read: Read) -> NearHit | None:
        """The near hit of a miss whose vector is in, or ``None`` (it fetches)."""
        shadow = self._shadow
        if failure(pending.vector) is not None:
            return None  # counted by the comparison after the fetch
        try:
            found = shadow.nearest(pending, Words(pending.query), pending.vector.result())
            if not isinstance(found, Candidate):
                return None
            band = band_of(found.similarity)
            allowed, bound = self.evidence.allows(band)
            if not allowed or self._freshness.settling(found.record.scopes):
                return None
            ids = ids_of(found.record.decode(found.stored))
        except Exception as error:
            shadow.failed(error)
            return None
        return NearHit(found, band, bound, self._due(), ids)

    def _due(self) -> bool:
        """Count a near hit; whether it is one of the ``verify_share`` verified (the first,
        then one in every ``1 / verify_share``)."""
        with self._lock:
            self._served += 1
            served = self._served
        share = self._share
        return math.ceil(served * share - 1e-9) > math.ceil((served - 1) * share - 1e-9)

    def _served_now(self, hit: NearHit, read: Read, observation: ReadObservation) -> Any:
        """Count and trace the near hit; its value for the caller."""
        value = read.decode(hit.candidate.stored)
        self._memory.count_near("served", hit.bound)
        if not hit.verify:
            self._freshness.ledger.earn()  # answered without a request (a verified one makes it)
        observation.near_hit(
            value,
            {
                NEAR_SIMILARITY: round(hit.candidate.similarity, 6),
                NEAR_BOUND: round(hit.bound, 6),
                NEAR_VERIFY: hit.verify,
            },
        )
        return value

    # -- verifications ------------------------------------------------------------------------
    def _started(self) -> None:
        with self._lock:
            self._verifying += 1

    def _ended(self) -> None:
        with self._lock:
            self._verifying -= 1

    def _done(self, task: asyncio.Task[None]) -> None:
        """A verification task ended (also one cancelled before it ran: its loop closed)."""
        self._tasks.discard(task)
        self._ended()

    def _verify(self, hit: NearHit, fetch: Callable[[], Any], decode: Callable[[Any], Any]) -> None:
        try:
            self._verified(hit, decode(fetch()))
        except Exception as error:  # no verdict: the answer was not seen
            self._shadow.failed(error)
        finally:
            self._ended()

    async def _averify(
        self, hit: NearHit, fetch: Callable[[], Awaitable[Any]], decode: Callable[[Any], Any]
    ) -> None:
        try:
            self._verified(hit, decode(await fetch()))
        except Exception as error:
            self._shadow.failed(error)

    def _verified(self, hit: NearHit, fetched: Any) -> None:
        """Count a verification's verdict: in the evidence at once, and in the stats."""
        try:
            agreed = agree(hit.ids, ids_of(fetched))
        except Exception as error:
            self._shadow.failed(error)
            return
        self.evidence.record(hit.band, agreed)
        self._memory.count_near("agreed" if agreed else "disagreed")
        self._memory.count_near("verified")
