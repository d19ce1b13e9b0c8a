"""The working memories (L1s) bound to a tier in this process, reachable by digest.

Invalidation messages carry digests only (never query text or parameters: any client allowed to
SUBSCRIBE could read them). Each process remembers the digest of every key and scope it loaded
through the tier, and maps a message's digests back to its own entries. The map is bounded: a
key or scope pushed out of it is dropped from L1 at once, so L1 never holds a shared entry that
a message could not reach.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, Final

from .._core import InvalidationSink
from .protocol import Plan

__all__ = ["Memories"]

_REMEMBERED: Final = 65_536  # keys (and, apart, scopes) whose digests this process knows


class Memories:
    def __init__(self, limit: int = _REMEMBERED) -> None:
        self._limit = limit
        self._weak: weakref.WeakSet[Any] = weakref.WeakSet()
        self._strong: list[InvalidationSink] = []  # sinks that cannot be weakly referenced
        self._keys: OrderedDict[str, Hashable] = OrderedDict()
        self._scopes: OrderedDict[str, Hashable] = OrderedDict()
        self._lock = threading.Lock()

    def after_fork(self) -> None:
        """In a forked child: a fresh lock (the parent may have held this one while forking)."""
        self._lock = threading.Lock()

    def bind(self, memory: InvalidationSink) -> None:
        try:
            self._weak.add(memory)
        except TypeError:
            self._strong.append(memory)

    def remember(self, plan: Plan, key: Hashable, scopes: tuple[Hashable, ...]) -> None:
        """Record the digests of a load's key and scopes (most recent last)."""
        with self._lock:
            gone_keys = _put(self._keys, plan.key_digest, key, self._limit)
            gone_scopes: list[Hashable] = []
            for found, scope in zip(plan.scope_digests, scopes, strict=True):
                gone_scopes += _put(self._scopes, found, scope, self._limit)
        if gone_keys or gone_scopes:
            self.drop(keys=gone_keys, scopes=gone_scopes)

    def heard(self, data: bytes) -> None:
        """A published invalidation: drop what its digests name in this process."""
        try:
            message = json.loads(data)
            everything = bool(message.get("all"))
            with self._lock:
                keys = [self._keys[d] for d in message.get("k", ()) if d in self._keys]
                scopes = [self._scopes[d] for d in message.get("s", ()) if d in self._scopes]
        except Exception:
            return  # not ours, or malformed: nothing to drop
        if keys or scopes or everything:
            self.drop(keys=keys, scopes=scopes, everything=everything)

    def drop(
        self,
        *,
        keys: list[Hashable] | tuple[()] = (),
        scopes: list[Hashable] | tuple[()] = (),
        everything: bool = False,
    ) -> None:
        for memory in [*self._weak, *self._strong]:
            try:
                memory.drop_local(keys=keys, scopes=scopes, everything=everything)
            except Exception:
                pass


def _put(
    table: OrderedDict[str, Hashable], name: str, item: Hashable, limit: int
) -> list[Hashable]:
    table[name] = item
    table.move_to_end(name)
    gone = []
    while len(table) > limit:
        gone.append(table.popitem(last=False)[1])
    return gone
