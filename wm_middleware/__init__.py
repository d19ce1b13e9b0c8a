"""wm_middleware: a working memory for AI agents in front of Supermemory's memory search.

Agents ask Supermemory the same questions many times per turn. ``wm_middleware`` puts an
in-process LRU + TTL cache with single-flight in front of the existing Python clients, so a
repeated search costs a dict lookup instead of a network round trip, and makes every read
observable with OpenTelemetry.

Usage with supermemory 5.x (what ``pip install supermemory`` installs)::

    import wm_middleware
    from supermemory import Supermemory

    memory = wm_middleware.instrument()          # patches the supermemory clients in-process
    client = Supermemory()                       # SUPERMEMORY_API_KEY from the environment
    client.search("user-1", query="user preferences")   # network
    client.search("user-1", query="user preferences")   # from the working memory
    print(memory.stats())   # CacheStats(hits=1, misses=1, coalesced=0, ...)

With supermemory 3.x (what supermemory-openai-sdk and the other integrations pin)::

    import wm_middleware
    from supermemory import Supermemory

    memory = wm_middleware.instrument()
    client = Supermemory()
    client.search.memories(q="user preferences", container_tag="user-1")   # network
    client.search.memories(q="user preferences", container_tag="user-1")   # from the memory
    print(memory.stats())   # CacheStats(hits=1, misses=1, coalesced=0, ...)

Or without monkeypatching: ``cached = wm_middleware.wrap(client)`` is a cached copy of either
generation's client; ``client`` stays uncached. Every option of ``instrument()`` and ``wrap()`` is
keyword-only; a setting not passed comes from its ``WM_MIDDLEWARE_*`` variable, else its default
(``cache``, ``max_entries``, ``ttl``, ``refresh_after``, ``shared``, ``shared_secret``,
``store_id``, ``freshness``, ``settle_interval``, ``settle_max``, ``openinference``,
``trace_hits``, ``httpx``, ``semantic``: the table is in docs/configuration.md). ``instrument()``
imports no client library: each is patched when the application imports it.

Under ``opentelemetry-instrument`` (the loader instruments with the ``WM_MIDDLEWARE_*``
variables), the working memory in use is ``WorkingMemoryInstrumentor().working_memory``. The
application's own ``wm_middleware.instrument(...)`` returns that memory when its settings are the
loader's; with other settings it re-instruments and returns the new memory, which is then the one
``working_memory`` gives.

Loaded on first use, so that what they depend on is imported only when needed:

* ``RedisTier``: the shared tier on Redis or Valkey (the ``redis`` extra);
* ``CachingTransport``, ``AsyncCachingTransport``: httpx transports caching the API's reads;
* ``configure_otlp``: SDK providers exporting over OTLP (the ``otlp`` extra);
* ``WorkingMemoryInstrumentor``: the ``opentelemetry-instrument`` loader's entry point (its base
  class's module imports packaging and importlib.metadata);
* ``SemanticReuse``: the near-duplicate shadow mode's configuration (``semantic=``; see
  :mod:`wm_middleware.semantic`);
* ``CacheStats``: what ``WorkingMemory.stats()`` returns (a dataclass: :mod:`dataclasses` is
  imported by the first ``stats()``, not at start-up).

What is cached: searches (3.x ``search.memories|execute|documents``, ``profile``,
``documents.list``; 5.x ``search``, ``profile``, ``list``). Never cached: writes (they invalidate
what they could change), raw/streaming responses, status polls, errors. Entries never cross
tenants: base URL, API key (fingerprinted), container tag / namespace and every parameter are
part of the key.
"""

from __future__ import annotations

from ._core import WorkingMemory
from ._core.lazy import lazily as _lazily
from ._instrumentor import instrument, uninstrument, wrap
from .version import __version__

TYPE_CHECKING = False  # typing is not imported at start-up (see wm_middleware._core)
if TYPE_CHECKING:
    from ._core.stats import CacheStats

__all__ = [
    "AsyncCachingTransport",
    "CacheStats",
    "CachingTransport",
    "RedisTier",
    "SemanticReuse",
    "WorkingMemory",
    "WorkingMemoryInstrumentor",
    "__version__",
    "configure_otlp",
    "instrument",
    "uninstrument",
    "wrap",
]

# Imported on first use (name -> its module): they pull in modules neither the cache core nor
# instrument() needs. redis-py is an extra (``wm-middleware[redis]``), and so is the OTLP
# exporter; BaseInstrumentor's module, which only the ``opentelemetry-instrument`` loader needs,
# imports packaging and importlib.metadata; CacheStats's imports dataclasses.
_LAZY = {
    "AsyncCachingTransport": "._adapters.httpx_transport",
    "CacheStats": "._core.stats",
    "CachingTransport": "._adapters.httpx_transport",
    "RedisTier": "._redis",
    "SemanticReuse": ".semantic",
    "WorkingMemoryInstrumentor": "._loader",
    "configure_otlp": "._telemetry.otlp",
}


__getattr__ = _lazily(__name__, _LAZY)


def __dir__() -> list[str]:
    # The lazily loaded names too, for dir() and help(), without importing them; RedisTier only
    # when redis-py is there, since help() gets every name it lists.
    from importlib.util import find_spec

    names = set(globals()) | set(__all__)
    if find_spec("redis") is None:
        names.discard("RedisTier")
    return sorted(names)
