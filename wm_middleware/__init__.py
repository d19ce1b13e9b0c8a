"""wm_middleware: a working memory for AI agents in front of Supermemory's memory search."""

from ._cache import CacheStats, WorkingMemory
from .version import __version__

__all__ = ["CacheStats", "WorkingMemory", "__version__"]
