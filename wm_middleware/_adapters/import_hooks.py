"""Post-import hooks: call a function once a module is imported, with the standard library only.

What ``wrapt.register_post_import_hook`` does, without importing wrapt (whose own import pulls in
asyncio and importlib.metadata) before a client library is there to patch, and with a way to
take a hook back, which wrapt lacks.

A finder at the front of ``sys.meta_path`` (installed by the first :func:`when_imported` that
has to wait) answers only for a module a hook waits for: it asks the finders after it for the
module's spec and wraps its loader, so that the hooks run right after the module's code, in the
importing thread. The module never sees the wrapper: its ``__loader__`` and
``__spec__.loader`` are the real loader's before its code runs. An import that fails runs no
hook; the hooks stay registered for the next attempt.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType

from .. import _logs

TYPE_CHECKING = False  # typing is not imported at start-up (see wm_middleware._core)
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from typing import Any

__all__ = ["discard", "when_imported"]

Hook = Callable[[ModuleType], None]

# module name -> the hooks waiting for its import. Written under _LOCK; the finder's lock-free
# ``name in _WAITING`` is a dict probe, atomic under the GIL.
_WAITING: dict[str, list[Hook]] = {}
_LOCK = threading.Lock()


def _new_lock() -> None:
    """In a forked child: a new lock (a thread of the parent importing may have held it)."""
    global _LOCK
    _LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_lock)


def when_imported(name: str, hook: Hook) -> None:
    """Call ``hook(module)`` once module ``name`` is imported: at once (in this thread) if it is
    in ``sys.modules`` already, else once, right after its first successful import.

    A hook that raises is logged, never raised: it would fail the application's import.
    """
    with _LOCK:
        module = sys.modules.get(name)
        if module is None:
            _WAITING.setdefault(name, []).append(hook)
            _install()
            return
    _run([hook], module)


def discard(name: str, hook: Hook) -> None:
    """Take back a hook :func:`when_imported` registered for ``name`` (a no-op if it ran)."""
    with _LOCK:
        waiting = _WAITING.get(name, [])
        if hook in waiting:
            waiting.remove(hook)
        if not waiting:
            _WAITING.pop(name, None)


def _run(hooks: Sequence[Hook], module: ModuleType) -> None:
    for hook in hooks:
        try:
            hook(module)
        except Exception:
            _logs.logger().warning(
                "wm_middleware: could not instrument %s", module.__name__, exc_info=True
            )


def _imported(name: str, module: ModuleType) -> None:
    with _LOCK:
        hooks = _WAITING.pop(name, [])
    # The module may have put another object in its place in sys.modules, as an import returns.
    _run(hooks, sys.modules.get(name, module))


def _install() -> None:
    """Put the finder first on ``sys.meta_path``, once. Lock held."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


class _Finder:
    """Finds nothing itself: for a module a hook waits for, the spec the later finders give,
    with a loader that runs the hooks after the module's code."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name not in _WAITING:
            return None
        meta_path = sys.meta_path
        later = meta_path[meta_path.index(self) + 1 :] if self in meta_path else meta_path
        for finder in later:
            find = getattr(finder, "find_spec", None)
            spec = None if find is None else find(name, path, target)
            if spec is None:
                continue
            # A loader without exec_module is a legacy one we cannot chain; leave it alone.
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _Loader(spec.loader)
            return spec  # type: ignore[no-any-return]
        return None


class _Loader:
    """``loader``, running the hooks waiting for the module once its code has run."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __getattr__(self, name: str) -> Any:
        # Everything else a loader may be asked (is_package, get_resource_reader, ...).
        return getattr(self.loader, name)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self.loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self.loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.loader
        self.loader.exec_module(module)
        _imported(module.__name__, module)
