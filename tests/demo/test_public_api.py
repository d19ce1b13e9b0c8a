"""The demo is a user of the public API: no module of ``wm_middleware/demo/`` imports a private
module of the package (``wm_middleware._x``, ``.._x``, ``from .. import _x``), at the top or
inside a function; and ``__main__`` only dispatches to the commands' own modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import wm_middleware

PACKAGE = Path(wm_middleware.__file__).parent
DEMO = sorted((PACKAGE / "demo").glob("*.py"))


def _modules(node: ast.Import | ast.ImportFrom) -> list[list[str]]:
    """The package-relative dotted paths an import statement loads (as lists of parts);
    absolute imports of other distributions are none of the package's."""
    if isinstance(node, ast.Import):
        names = [alias.name.split(".") for alias in node.names]
        return [parts[1:] for parts in names if parts[0] == "wm_middleware"]
    if node.level == 0:
        parts = (node.module or "").split(".")
        return [parts[1:]] if parts[0] == "wm_middleware" else []
    base = (node.module or "").split(".") if node.module else []
    # ``from .. import _core`` loads a module as a name: each name is a candidate too.
    return [base, *([*base, alias.name] for alias in node.names)]


def _private_imports(path: Path) -> list[str]:
    """``file:line: statement`` of every import in ``path`` of a private module (a ``_x`` part)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            part.startswith("_") for parts in _modules(node) for part in parts
        ):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_demo_package_has_modules_to_check() -> None:
    assert {"cli.py", "runner.py", "fleet.py", "report.py", "agent.py"} <= {p.name for p in DEMO}


@pytest.mark.parametrize("path", DEMO, ids=[p.name for p in DEMO])
def test_no_demo_module_imports_a_private_module(path: Path) -> None:
    assert _private_imports(path) == []


def test_the_check_finds_each_form_of_private_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from .._core import WorkingMemory\n"
        "import wm_middleware._redis\n"
        "from .. import _instrumentor\n"
        "def late():\n"
        "    from wm_middleware._telemetry.otlp import probe\n"
        "from __future__ import annotations\n"
        "from .. import instrument\n"
        "from ..otlp import probe\n"
        "import json\n",
        encoding="utf-8",
    )

    assert _private_imports(sample) == [
        "sample.py:1: from .._core import WorkingMemory",
        "sample.py:2: import wm_middleware._redis",
        "sample.py:3: from .. import _instrumentor",
        "sample.py:5: from wm_middleware._telemetry.otlp import probe",
    ]


def test_main_is_a_dispatcher_of_two_command_tables() -> None:
    from wm_middleware.__main__ import SERVE
    from wm_middleware.demo.cli import DEMO

    source = (PACKAGE / "__main__.py").read_text(encoding="utf-8")
    assert [DEMO.name, SERVE.name] == ["demo", "serve"]
    assert "run_demo" not in source
    assert "run_fleet" not in source
    assert len(source.splitlines()) < 160
