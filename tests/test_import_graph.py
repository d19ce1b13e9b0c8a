"""The package's modules import one another without a cycle.

Every import statement counts, wherever it stands: at the top of a module, under
``if TYPE_CHECKING:`` (a cycle of types is still two modules that each need the other to be
read) and inside a function (an import deferred to keep start-up short still makes the two
modules depend on each other). A module's own package counts as a module (``from . import X``
in a submodule imports the package's ``__init__``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import wm_middleware

PACKAGE = Path(wm_middleware.__file__).parent


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``module`` imports, anywhere in its text."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:  # ``from . import names`` imports the module ``names``
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in modules else target)
    return {name for name in found if name in modules and name != module}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as the path that closes it, or ``None``."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return None
        for target in sorted(graph[node]):
            found = visit(target, [*path, node])
            if found is not None:
                return found
        done.add(node)
        return None

    for start in sorted(graph):
        found = visit(start, [])
        if found is not None:
            return found
    return None


def test_the_graph_reads_every_kind_of_import() -> None:
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    assert "wm_middleware._core" in graph["wm_middleware._runtime"]  # at the top
    assert "wm_middleware._runtime" in graph["wm_middleware._adapters"]  # under TYPE_CHECKING
    assert "wm_middleware._redis" in graph["wm_middleware._instrumentor"]  # inside a function
    assert "wm_middleware._telemetry.names" in graph["wm_middleware._telemetry.observe"]


def test_no_module_of_the_package_imports_itself_back() -> None:
    modules = _modules()
    graph = {name: _imported(name, path, modules) for name, path in modules.items()}
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_a_cycle_is_found_and_named() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
