"""Write-aware freshness that never costs more upstream requests than no cache.

Supermemory answers a write at once and indexes it afterwards (``queued -> extracting -> chunking
-> embedding -> indexing -> done``); search and profile return it only once it is done. After a
write through an instrumented or wrapped client:

1. the adapter describes how to follow it (:class:`Follow`: API generation, base URL, the
   client's own headers, the 5.x namespace, and the client itself, which the status requests
   go through); :func:`documents_named` reads the ids and statuses of the documents the answer
   names (:mod:`.documents`);
2. documents not ``done`` yet are *pending*: their write's scopes settle
   (:meth:`WorkingMemory.settle`, at most ``settle_max`` seconds). While a scope settles, an
   entry fetched for it is served for three quarters of a ``settle_interval``, then it
   expires;
3. no read waits for a status check: a read is answered from memory, or by its own fetch as an
   uncached client's would be. A read answered from memory earns a credit in the ledger
   (:mod:`.ledger`); when what answered it will not answer the key's next read, it starts one
   status request (:mod:`.checks`: 3.x the processing list of every pending document, 5.x
   the oldest pending document) beside the reads (:mod:`.ahead`), paid by a credit. Still
   pending: the copy fetched since the write is what the API answered when the check began,
   and reads that begin after the check has answered, within three quarters of an interval of
   its start, are served it. Finished: the settle ends (the scopes are dropped here and in the
   shared tier) and the next read fetches the new state, cached as usual. No answer: nothing is
   vouched for, reads fetch.
4. a settle that reaches ``settle_max`` with documents still pending begins again, so the
   pre-index answer is never cached for a whole ttl.

So ``checks <= reads answered from memory`` and the requests with the cache never exceed those
of the same calls without it; and a read waits on one upstream request at most, its own.

With a shared tier, the settle is announced to every process (the tier's ``settles()``); they
cap what they store for the scope to the same three quarters of an interval and to the
settle's deadline.
"""

from __future__ import annotations

from .documents import FINISHED, STAGES, Follow, documents_named
from .pending import Freshness, check_settings

__all__ = ["FINISHED", "STAGES", "Follow", "Freshness", "check_settings", "documents_named"]
