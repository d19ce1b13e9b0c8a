"""The seam between the in-process working memory (L1) and an optional shared second tier.

Lookup order is: L1, then the in-process flight, then the shared tier, then the fetch. The
working memory calls the tier only from the leader of an in-process flight, so one process sends
at most one tier request per flight at a time. Knows nothing of Redis: ``RedisTier`` implements it.

Contract for an implementation:

* ``load`` / ``aload`` never raise because of the tier itself: a tier failure is counted in
  ``errors`` and the fetch runs directly. An exception of ``fetch`` propagates unchanged and is
  cached nowhere.
* ``invalidate`` / ``clear`` reach every process sharing the tier, including this one's L1 via
  :meth:`InvalidationSink.drop_local` of the memories bound to the tier.
* A tier may also announce settles to the fleet: ``settles()`` returns its
  :class:`SettleBoard` (``RedisTier`` does); freshness looks for that method, never a class.
* A tier may also pool near-duplicate evidence across the fleet: ``evidence(family)`` returns
  a board of the verdicts of that configuration family (``RedisTier`` does; see
  :mod:`wm_middleware._near.evidence`).
* With a :class:`SharedCodec` a value crosses the tier as ``codec.dump(value)`` and comes back as
  ``codec.load(data)``; without one the tier decides how (``RedisTier``: JSON values only).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any, Protocol, runtime_checkable

from .outcomes import TierResult

__all__ = ["InvalidationSink", "SettleBoard", "SharedCodec", "SharedTier", "TierResult"]


class SharedCodec:
    """How one kind of cached value crosses the shared tier: as JSON data, never pickled.

    A writer to a shared store must not be able to run code in its readers, so what other
    processes read is plain data, usually the API's own response body, from which each reader
    rebuilds the client's own return type.

    * ``dump(snapshot)``: the value the working memory holds (an adapter's snapshot) as JSON data
      (dicts with str keys, lists, str, int, float, bool), or ``None`` to keep it in this
      process only.
    * ``load(data)``: a snapshot rebuilt from that data, which the adapter decodes for its
      callers into an object ``==`` to the one ``dump`` was given, of the same type. It may raise
      on data it cannot read: the tier then treats the entry as a miss.

    Both run only when the tier is used (a store, a shared hit or wait), never on an L1 hit.
    """

    __slots__ = ("dump", "load")

    def __init__(self, dump: Callable[[Any], Any], load: Callable[[Any], Any]) -> None:
        self.dump = dump
        self.load = load


class InvalidationSink(Protocol):
    """What a tier calls back when another process invalidates (the working memory)."""

    def drop_local(
        self,
        *,
        keys: Iterable[Hashable] = (),
        scopes: Iterable[Hashable] = (),
        everything: bool = False,
    ) -> int:
        """Drop matching L1 entries and detach matching local flights, without telling the tier."""
        ...


Answers = Callable[[dict[str, Any], float], bool]
"""Whether another process's status answer, requested at the epoch seconds given, answers a
status round here."""


class SettleBoard(Protocol):
    """Which scopes settle anywhere in the fleet (a tier's ``settles()``): one process's write
    announced, every process's reads of the scope capped until it ends."""

    def begin(self, scopes: Iterable[Hashable], seconds: float) -> None:
        """Announce that ``scopes`` settle for ``seconds`` at most."""
        ...

    def end(self, scopes: Iterable[Hashable]) -> None:
        """Announce that ``scopes`` have settled."""
        ...

    def deadline(self, scopes: Iterable[Hashable]) -> float | None:
        """The earliest monotonic deadline of a settle covering any of ``scopes``, or None."""
        ...

    def foreign(self, scopes: Iterable[Hashable]) -> bool:
        """Whether a settle of another process covers any of ``scopes`` (its documents are not
        known here: nothing can confirm a copy of the scope in this process)."""
        ...

    def status_round(
        self, scopes: Iterable[Hashable], seconds: float, ask: Callable[[], Any], answers: Answers
    ) -> tuple[Any, float] | None:
        """One status round for the tenant of ``scopes`` for the whole fleet: another
        process's answer (a JSON object) if ``answers(answer, began)`` says it answers this
        round, or ``ask()`` here under the tenant's lease, shared for ``seconds``; with when
        its request began (epoch seconds). ``None``: another process makes it now, or ``ask``
        failed (returned ``None``)."""
        ...


@runtime_checkable
class SharedTier(Protocol):
    """A second cache tier shared by several processes."""

    @property
    def errors(self) -> int:
        """Tier operations that failed or timed out and were treated as a miss."""
        ...

    def bind(self, memory: InvalidationSink) -> None:
        """Register ``memory`` to hear invalidations from other processes."""
        ...

    def load(
        self,
        key: Hashable,
        scopes: tuple[Hashable, ...],
        ttl: float,
        fetch: Callable[[], Any],
        codec: SharedCodec | None = None,
    ) -> TierResult:
        """Shared hit, or wait for another process's fetch, or lease, fetch and store.

        ``codec``, when given, turns the fetched value into what is stored and a stored entry
        back into a value (see :class:`SharedCodec`).
        """
        ...

    async def aload(
        self,
        key: Hashable,
        scopes: tuple[Hashable, ...],
        ttl: float,
        fetch: Callable[[], Awaitable[Any]],
        codec: SharedCodec | None = None,
    ) -> TierResult:
        """Async :meth:`load`."""
        ...

    def invalidate(self, *, keys: Iterable[Hashable] = (), scopes: Iterable[Hashable] = ()) -> None:
        """Make every process miss ``keys`` and every entry carrying one of ``scopes``."""
        ...

    def clear(self) -> None:
        """Make every process miss every entry of this tier's namespace."""
        ...
