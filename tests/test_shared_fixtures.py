"""Every test directory uses the one definition of a fixture or helper in tests/conftest.py: a
directory's conftest may import one (to keep it importable from there) but never defines its own
under the same name, which would shadow the root's for that directory's tests."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
CONFTESTS = sorted(TESTS.glob("*/conftest.py"))


def _defined(path: Path) -> set[str]:
    """The functions and classes ``path`` defines at module level."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in tree.body if isinstance(node, kinds)}


def test_the_root_conftest_defines_the_shared_fixtures() -> None:
    assert {"mode", "wait_until", "emulator_server", "emulator"} <= _defined(TESTS / "conftest.py")


@pytest.mark.parametrize("conftest", CONFTESTS, ids=[p.parent.name for p in CONFTESTS])
def test_no_directory_redefines_a_root_fixture_or_helper(conftest: Path) -> None:
    assert not _defined(conftest) & _defined(TESTS / "conftest.py")


def test_answers_compare_without_what_each_request_measured() -> None:
    import httpx

    from .conftest import answer_of

    first = {"results": [{"id": "a"}], "timing": 1, "total": 1}
    again = {"results": [{"id": "a"}], "timing": 30, "total": 1}  # the same, measured slower
    profile = {"profile": {"static": []}, "searchResults": {"results": [], "searchTime": 2}}
    assert answer_of(first) == answer_of(again) == answer_of(httpx.Response(200, json=again))
    assert answer_of(profile) == {"profile": {"static": []}, "searchResults": {"results": []}}
    assert answer_of(first) != answer_of({**first, "results": [{"id": "b"}]})
