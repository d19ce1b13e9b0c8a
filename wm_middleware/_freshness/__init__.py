"""Write-aware freshness that never costs more upstream requests than no cache.

Supermemory answers a write at once and indexes it afterwards (``queued -> extracting -> chunking
-> embedding -> indexing -> done``); search and profile return it only once it is done. After a
write through an instrumented or wrapped client:

1. the adapter describes how to follow it (:class:`Follow`: API generation, base URL, the
   client's own headers, the 5.x namespace); :func:`documents_named` reads the ids and statuses
   of the documents the answer names (:mod:`.documents`);
2. documents not ``done`` yet are *pending*: their write's scopes settle
   (:meth:`WorkingMemory.settle`, at most ``settle_max`` seconds). While a scope settles, an
   entry fetched for it is served for three quarters of a ``settle_interval``, then it
   expires;
3. a read that finds it expired fetches, as an uncached client does, unless a status check
   can save it: the ledger (:mod:`.ledger`) holds a credit (every read answered from memory
   earns one, every check spends one) and one request (:mod:`.checks`: 3.x the processing
   list, 5.x the oldest pending document) finds the write's documents still pending. Then the
   copy fetched since the write is what the API answers now: it is served and kept for another
   three quarters of an interval. A check (made before the read's flight begins) that finds
   them finished ends the settle: the scopes are dropped here and in the shared tier, and the
   read fetches the new state, cached as usual.

So ``checks <= reads answered from memory`` and the requests with the cache never exceed those
of the same calls without it. There is no background polling: a check is made for a read that
waits for it, never on a timer, and a check that fails only makes the read fetch.

With a shared tier, the settle is announced to every process (the tier's ``settles()``); they
cap what they store for the scope to the same three quarters of an interval and to the
settle's deadline.
"""

from __future__ import annotations

from .documents import FINISHED, STAGES, Follow, documents_named
from .pending import Freshness, check_settings

__all__ = ["FINISHED", "STAGES", "Follow", "Freshness", "check_settings", "documents_named"]
