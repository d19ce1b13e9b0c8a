"""The fleet's near-duplicate evidence: each process's verdicts, pooled once per configuration.

One hash per configuration family (:func:`wm_middleware._near.evidence.family_of`: the form and
the vetoes, never a query), under the namespace's hash tag: field ``<band> <process token>``,
value that process's totals ``<agreed> <disagreed>``. A process only ever overwrites its own
fields with its totals, so a store retried or repeated counts nothing twice, and a reader sums
the other processes' fields. With a secret each value carries a MAC bound to its key and field
(:meth:`Layout.seal`): a Redis writer without the secret can neither make evidence up nor move
one process's totals to another band or family; a value that does not verify is left out
(logged once). The hash lives :data:`_KEPT_MS` past its last store.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
from collections.abc import Callable, Mapping
from typing import Any, Final

from .._core.forks import reset_in_child
from .protocol import Layout
from .scripts import POOL_EVIDENCE, Run

__all__ = ["SharedEvidence"]

logger = logging.getLogger(__name__)

_KEPT_MS: Final = 30 * 24 * 3600 * 1000  # a month past the last verdict of any process

Counts = tuple[int, int]


class SharedEvidence:
    """The evidence board of one configuration family on the tier (see the module docstring).

    Args:
        layout: the tier's names and seal.
        send: runs one step on the tier's connection of this process (raises on a failure).
        family: the configuration family (the form and the vetoes).
    """

    def __init__(self, layout: Layout, send: Callable[[Run], Any], family: str) -> None:
        self._layout = layout
        self._send = send
        name = hashlib.sha256(family.encode()).hexdigest()[:32]
        self.key = f"{layout.prefix}{{t:{layout.namespace}}}:near:{name}"
        # Made here, not at the first exchange: two threads exchanging at once (a read's sync
        # thread and a caller's) would each make one, and the fleet would count this process
        # twice. A forked child makes its own (_after_fork).
        self.origin = _token()
        self._warned = False
        reset_in_child(self)

    def _after_fork(self) -> None:
        """In a forked child: a token of its own (its verdicts are not its parent's)."""
        self.origin = _token()

    def exchange(self, own: Mapping[str, Counts]) -> dict[str, Counts]:
        """Store this process's totals by band, return the other processes' totals by band."""
        origin = self.origin
        args: list[Any] = [_KEPT_MS]
        for band, (agreed, disagreed) in own.items():
            field = f"{band} {origin}"
            args += [
                field,
                self._layout.seal(self._bound_to(field), b"%d %d" % (agreed, disagreed)),
            ]
        reply = self._send(Run(tuple(args), POOL_EVIDENCE, (self.key,)))
        others: dict[str, Counts] = {}
        for name, value in _pairs(reply):
            try:
                text = str(name, "utf-8")
                band, _, by = text.partition(" ")
                if by == origin:
                    continue
                payload = self._layout.unsealed(self._bound_to(text), value)
                if payload is None:
                    self._refused()
                    continue
                agreed, disagreed = (int(part) for part in payload.split())
            except Exception:
                continue  # not a field of this library's
            if agreed < 0 or disagreed < 0:
                continue
            found = others.get(band, (0, 0))
            others[band] = (found[0] + agreed, found[1] + disagreed)
        return others

    def _bound_to(self, field: str) -> str:
        """What a value's MAC is bound to: the hash and the field."""
        return f"{self.key}\n{field}"

    def _refused(self) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(
                "wm_middleware: near-duplicate evidence failed its MAC (written without the "
                "tier's secret); left out"
            )


def _pairs(fields: Any) -> list[tuple[bytes, bytes]]:
    """HGETALL's reply as pairs: a dict (RESP3, or parsed), or a flat list (raw RESP2)."""
    if isinstance(fields, dict):
        return list(fields.items())
    flat = list(fields or ())
    return list(zip(flat[::2], flat[1::2], strict=True))


def _token() -> str:
    """A process's token in the field names: its pid and a random part (pids are reused)."""
    return f"{os.getpid()}-{secrets.token_hex(4)}"
