"""Canonical keys: the same Python key names the same Redis key in every process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Hashable

from hypothesis import given
from hypothesis import strategies as st

from wm_middleware._core import make_key
from wm_middleware._redis.encoding import canonical_key, key_from_canonical

atoms = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)
)
keys = st.recursive(
    atoms,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(tuple), st.frozensets(inner, max_size=4)
    ),
    max_leaves=12,
)


@given(keys)
def test_a_canonical_key_decodes_to_an_equal_key(key: Hashable) -> None:
    assert key_from_canonical(canonical_key(key)) == key


@given(keys)
def test_equal_frozensets_have_one_canonical_form(key: Hashable) -> None:
    assert canonical_key(frozenset([key, "x"])) == canonical_key(frozenset(["x", key]))


def test_canonical_keys_do_not_depend_on_the_hash_seed() -> None:
    key = make_key("prefs", {"container_tags": {"b", "a"}, "limit": 5, "rerank": True})
    code = (
        "from wm_middleware._core import make_key;"
        "from wm_middleware._redis.encoding import canonical_key;"
        "print(canonical_key(make_key('prefs', {'container_tags': {'b', 'a'}, 'limit': 5,"
        " 'rerank': True})))"
    )
    seen = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2", "3")
    }
    assert seen == {canonical_key(key)}


def test_true_and_one_are_different_keys() -> None:
    assert canonical_key(("limit", True)) != canonical_key(("limit", 1))
    assert canonical_key(("limit", 1.0)) != canonical_key(("limit", 1))
