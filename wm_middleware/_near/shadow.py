"""The shadow mode of one runtime: an index of cached queries, and what a miss does beside it.

On a miss (:meth:`Shadow.begin`, before the fetch) the read's partition is found and its query's
vector started: at once for the lexical form, in a worker thread for an embedder, so that it
runs while the fetch does. When the fetch returns (:meth:`Shadow.finish` / :meth:`afinish`,
before the read's span ends) the miss waits at most ``timeout`` more for the vector, finds the
nearest live cached query of its partition that passes the threshold and every veto, compares
the two answers' record ids, counts the verdict, and adds its own query to the index. The caller
gets the fetched answer whatever happens here: every step is guarded, and a failure is counted
in ``near_errors`` and logged once.

Hard cases, on purpose:

* **A hanging embedder.** The miss waits ``timeout`` and goes on; at most :data:`_WORKERS`
  embeddings run at once, and a miss finding them all busy is an error at once, so a hung
  embedder costs a few parked threads, never a slower read. A late vector is still indexed.
* **A replaced answer.** A record keeps no answer: the candidate's ids are read from the value
  the memory holds for its key when the miss is compared (what a hit would serve then), so a
  background refresh or a later store of the key is what the comparison sees.
* **Memory.** The index holds one record (query words, vector, decoder) per cached entry,
  at most the memory's ``max_entries``, oldest dropped first; a record whose entry is gone
  (evicted, expired, invalidated, cleared) is dropped when its partition is next looked at, or
  by the sweep of the oldest records that each addition makes, whichever comes first. A lookup
  reads at most the partition's records.
* **Tenants.** A partition starts with the key's tenant: another tenant's queries are never
  looked at.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent import futures
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .. import _logs
from .._core import MISSING
from .._core.forks import reset_in_child
from .._telemetry.names import (
    NEAR_COMPARISONS,
    NEAR_QUERY,
    NEAR_SIMILARITY,
    NEAR_VERDICT,
    NEAR_VETO,
)
from .answers import agree, ids_of, partition_of
from .text import Words

if TYPE_CHECKING:
    from .._calls import Read
    from .._core import WorkingMemory
    from .._telemetry import ReadObservation, Telemetry
    from ..semantic import SemanticReuse, Vector

__all__ = ["Candidate", "Pending", "Shadow", "Verdict"]

_WORKERS: Final = 4  # embeddings running at once, hung ones included
_SWEPT: Final = 2  # the oldest records looked at by each addition (see Shadow._sweep)


class _Record(NamedTuple):
    """One cached query: its entry's key, words, vector, and how its stored value is read.

    No answer is kept here: a comparison reads the entry's value as the memory holds it then
    (a background refresh or a later store of the key may have replaced it since).
    """

    key: Hashable
    words: Words
    vector: Vector
    decode: Callable[[Any], Any]
    scopes: tuple[Hashable, ...]  # its read's: whether they settle, when it is served


class Pending(NamedTuple):
    """A miss's shadow work between its fetch's start and end."""

    key: Hashable
    partition: Hashable
    query: str
    vector: Future[Any]
    decode: Callable[[Any], Any]
    scopes: tuple[Hashable, ...]


class Candidate(NamedTuple):
    """The nearest live cached query of a miss's partition that passes every test, and the
    value the memory holds for it now (what a hit of it would serve)."""

    similarity: float
    record: _Record
    stored: Any


class Verdict(NamedTuple):
    """What a miss's comparison found (``similarity`` of the candidate, else of the nearest;
    ``near``: the candidate's query text)."""

    verdict: str
    similarity: float | None = None
    veto: str | None = None
    near: str | None = None


class Shadow:
    """The index and the comparisons of one runtime's shadow mode.

    ``_lock`` guards ``_partitions``, ``_order``, ``_running`` and ``_embedding``; similarities,
    vetoes and the embedder run outside it.
    """

    def __init__(
        self, semantic: SemanticReuse, memory: WorkingMemory[Any], telemetry: Telemetry
    ) -> None:
        self.semantic = semantic
        self._memory = memory
        self._telemetry = telemetry
        self._lock = threading.Lock()
        self._partitions: dict[Hashable, dict[Hashable, _Record]] = {}
        self._order: OrderedDict[Hashable, Hashable] = OrderedDict()  # key -> its partition
        self._running = 0
        self._embedding: dict[Hashable, Future[Any]] = {}  # key -> its embedding under way
        self._logged = False
        self._counter: Any = None
        try:  # telemetry never breaks a call, nor the instrument() that makes this
            self._counter = telemetry.instruments.meter.create_counter(
                NEAR_COMPARISONS,
                unit="{miss}",
                description="Misses compared with a near-duplicate cached query, by verdict.",
            )
        except Exception:
            pass
        # Serve mode hears each verdict (``Serving`` sets it); None: shadow mode alone.
        self.on_verdict: Callable[[float, bool], None] | None = None
        reset_in_child(self)

    def _after_fork(self) -> None:
        """In a forked child (see ``_core/forks.py``): a new lock, and no embedding of the
        parent's under way (its worker threads do not run here; one counted busy would be for
        ever); the vectors done stay."""
        self._lock = threading.Lock()
        self._running = 0
        self._embedding = {key: f for key, f in self._embedding.items() if f.done()}

    def __len__(self) -> int:
        """Cached queries indexed now."""
        return len(self._order)

    # -- a miss -------------------------------------------------------------------------------
    def begin(self, read: Read) -> Pending | None:
        """Start a miss's shadow work; ``None`` when its read has no partition (or failed)."""
        try:
            query = read.query
            partition = partition_of(read.key, query)
            if partition is None or query is None:
                return None
            vector = self._vector(read.key, partition, query)
            return Pending(read.key, partition, query, vector, read.decode, read.scopes)
        except Exception as error:
            self.failed(error)
            return None

    def finish(self, pending: Pending, outcome: str, value: Any, observation: Any) -> None:
        """End a miss's shadow work once its fetch returned ``value`` (this call led it)."""
        if outcome != "miss":
            return  # a hit or a joined fetch: not a miss of this call
        # Waited for, not ``result()``: what the embedder raised (an interrupt of its thread
        # included) is read as data here, while an interrupt of this thread's own propagates.
        futures.wait((pending.vector,), timeout=self.semantic.timeout)
        error = failure(pending.vector)
        if error is not None:
            self._late(pending, error, observation)
            return
        self._settle(pending, pending.vector.result(), value, observation)

    async def afinish(self, pending: Pending, outcome: str, value: Any, observation: Any) -> None:
        """Async :meth:`finish`: the wait for the vector does not block the event loop."""
        if outcome != "miss":
            return
        if not pending.vector.done():
            await _waited(pending.vector, self.semantic.timeout)
        error = failure(pending.vector)
        if error is not None:
            self._late(pending, error, observation)
            return
        self._settle(pending, pending.vector.result(), value, observation)

    # -- the steps ------------------------------------------------------------------------------
    def _vector(self, key: Hashable, partition: Hashable, query: str) -> Future[Any]:
        """The query's vector: computed now (lexical), or by a worker thread (an embedder).

        The embedder is asked once per query: a miss of a key still indexed (its entry gone
        since) takes the record's vector, and misses of one key share one embedding until its
        record is indexed (at most ``max_entries`` kept, for misses whose fetch failed).
        """
        future: Future[Any] = Future()
        if self.semantic.embed is None:
            future.set_result(self.semantic.vectors([query])[0])
            return future
        with self._lock:
            record = self._partitions.get(partition, {}).get(key)
            shared = self._embedding.get(key)
            busy = record is None and shared is None and self._running >= _WORKERS
            if record is None and shared is None and not busy:
                self._running += 1
                self._embedding[key] = future
                if len(self._embedding) > self._memory.max_entries:
                    del self._embedding[next(iter(self._embedding))]  # a miss that failed
        if record is not None:
            future.set_result(record.vector)
        elif shared is not None:
            return shared
        elif busy:
            future.set_exception(TimeoutError("every embedding worker is busy"))
        else:
            thread = threading.Thread(
                target=self._embed, args=(key, query, future), name="wm-near-embed", daemon=True
            )
            thread.start()
        return future

    def _embed(self, key: Hashable, query: str, future: Future[Any]) -> None:
        failed = True
        try:
            future.set_result(self.semantic.vectors([query])[0])
            failed = False
        except Exception as error:  # the embedder's: reported by the miss waiting for it
            future.set_exception(error)
        except BaseException as error:
            # An interrupt or exit (or a cancellation) of this thread: the miss counts an error
            # and keeps its answer, and it goes on here, in the thread it was raised in.
            future.set_exception(error)
            raise
        finally:
            with self._lock:
                self._running -= 1
                if failed and self._embedding.get(key) is future:
                    del self._embedding[key]  # a vector is kept until its record is indexed

    def _settle(self, pending: Pending, vector: Vector, value: Any, observation: Any) -> None:
        try:
            ids = ids_of(value)
            words = Words(pending.query)
            verdict = self._judge(pending, words, vector, ids)
            self._add(_Record(pending.key, words, vector, *pending[4:]), pending.partition)
        except Exception as error:
            self.failed(error)
            verdict = Verdict("error")
        heard = self.on_verdict
        if heard is not None and verdict.verdict in ("agreed", "disagreed"):
            heard(verdict.similarity or 0.0, verdict.verdict == "agreed")
        self._observe(verdict, observation)

    def _late(self, pending: Pending, error: BaseException, observation: Any) -> None:
        """The vector failed or is late: an error now; a late one is indexed when it comes."""
        self.failed(error)
        self._observe(Verdict("error"), observation)

        def arrived(future: Future[Any]) -> None:
            if future.cancelled() or future.exception() is not None:
                return
            try:
                vector = future.result()
                record = _Record(pending.key, Words(pending.query), vector, *pending[4:])
                self._add(record, pending.partition)
            except Exception:
                pass  # counted once already

        pending.vector.add_done_callback(arrived)

    def _judge(self, pending: Pending, words: Words, vector: Vector, ids: Any) -> Verdict:
        """Compare with the nearest cached query of the partition that passes every test."""
        found = self.nearest(pending, words, vector)
        if not isinstance(found, Candidate):
            return found
        served = ids_of(found.record.decode(found.stored))  # what a hit would serve for it now
        verdict = "agreed" if agree(served, ids) else "disagreed"
        return Verdict(verdict, found.similarity, None, found.record.words.text)

    def nearest(self, pending: Pending, words: Words, vector: Vector) -> Candidate | Verdict:
        """The candidate of a miss, else why there is none (``none`` or ``vetoed``)."""
        semantic = self.semantic
        scored = sorted(
            (
                (semantic.similarity(vector, record.vector), record)
                for record in self._live(pending)
            ),
            key=lambda pair: -pair[0],
        )
        if not scored:
            return Verdict("none")
        first_veto: str | None = None
        for similarity, record in scored:
            if similarity < semantic.min_similarity:
                break
            veto = semantic.refused_by(record.words, words)
            if veto is None:
                stored = self._memory.peek(record.key)
                if stored is MISSING:
                    continue  # dropped since it was found live
                return Candidate(similarity, record, stored)
            first_veto = first_veto or veto
        if first_veto is not None:
            return Verdict("vetoed", scored[0][0], first_veto)
        return Verdict("none", scored[0][0])

    def _live(self, pending: Pending) -> list[_Record]:
        """The records of the miss's partition whose entries are live (others are dropped)."""
        with self._lock:
            records = list(self._partitions.get(pending.partition, {}).values())
        live: list[_Record] = []
        dead: list[_Record] = []
        for record in records:
            if record.key != pending.key:
                (dead if self._memory.peek(record.key) is MISSING else live).append(record)
        if dead:
            with self._lock:
                for record in dead:
                    current = self._partitions.get(pending.partition, {}).get(record.key)
                    if current is record:  # not one indexed again since
                        self._drop(record.key)
        return live

    def _add(self, record: _Record, partition: Hashable) -> None:
        """Index ``record``, keeping at most the memory's ``max_entries`` records."""
        if self._memory.peek(record.key) is MISSING:
            return  # not stored (invalidated during the fetch, or kept out of this process)
        with self._lock:
            self._embedding.pop(record.key, None)
            self._drop(record.key)
            self._sweep()
            self._partitions.setdefault(partition, {})[record.key] = record
            self._order[record.key] = partition
            while len(self._order) > self._memory.max_entries:
                self._drop(next(iter(self._order)))

    def _sweep(self) -> None:
        """Look at the :data:`_SWEPT` oldest records (under ``_lock``): one whose entry is gone is
        dropped, a live one goes last. So each record is looked at again within
        ``len(self) / _SWEPT`` additions, whatever partition they are in: the query text of an
        entry evicted, expired, invalidated or cleared is not kept for long."""
        for _ in range(min(_SWEPT, len(self._order))):
            key = next(iter(self._order))
            if self._memory.peek(key) is MISSING:
                self._drop(key)
            else:
                self._order.move_to_end(key)

    def _drop(self, key: Hashable) -> None:
        """Forget ``key``'s record (under ``_lock``)."""
        partition = self._order.pop(key, None)
        if partition is None:
            return
        records = self._partitions.get(partition)
        if records is not None:
            records.pop(key, None)
            if not records:
                del self._partitions[partition]

    # -- reporting ------------------------------------------------------------------------------
    def _observe(self, verdict: Verdict, observation: ReadObservation) -> None:
        """Count ``verdict`` (stats and the counter) and put it on the miss's span."""
        try:
            if verdict.verdict in ("agreed", "disagreed", "vetoed"):  # errors: see failed
                self._memory.count_near(verdict.verdict)
            if self._counter is not None:
                self._counter.add(1, {NEAR_VERDICT: verdict.verdict})
            span = observation.span
            if span is None or not span.is_recording():
                return
            attributes: dict[str, Any] = {NEAR_VERDICT: verdict.verdict}
            if verdict.similarity is not None:
                attributes[NEAR_SIMILARITY] = round(verdict.similarity, 6)
            if verdict.veto is not None:
                attributes[NEAR_VETO] = verdict.veto
            if verdict.near is not None and self._telemetry.capture_content:
                attributes[NEAR_QUERY] = verdict.near
            span.set_attributes(attributes)
        except Exception:  # telemetry never breaks a call
            pass

    def failed(self, error: BaseException) -> None:
        """Count an error of the shadow work; log the first (its type only: no query text)."""
        try:
            self._memory.count_near("errors")
        except Exception:
            pass
        if not self._logged:
            self._logged = True
            _logs.logger().warning(
                "wm_middleware: a near-duplicate comparison failed (%s); reads go on "
                "unchanged, and further failures are only counted (near_errors)",
                type(error).__name__,
            )


def failure(vector: Future[Any]) -> BaseException | None:
    """Why ``vector`` has no result (``None``: it has one), read without raising it."""
    if not vector.done():
        return TimeoutError("the embedding ran out of time")
    if vector.cancelled():
        return futures.CancelledError()
    return vector.exception()


async def _waited(future: Future[Any], seconds: float) -> None:
    """Wait at most ``seconds`` for ``future`` (of a worker thread) without blocking."""
    import asyncio

    loop = asyncio.get_running_loop()
    woken: asyncio.Future[None] = loop.create_future()

    def wake(_: Future[Any]) -> None:
        try:
            loop.call_soon_threadsafe(_set, woken)
        except RuntimeError:  # the loop closed meanwhile
            pass

    future.add_done_callback(wake)
    await asyncio.wait({woken}, timeout=seconds)


def _set(woken: Any) -> None:
    if not woken.done():
        woken.set_result(None)
