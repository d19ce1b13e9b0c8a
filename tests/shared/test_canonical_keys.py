"""Canonical keys: the same Python key names the same Redis key in every process."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Hashable
from typing import NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wm_middleware._api.tenancy import TenantScope
from wm_middleware._core import make_key
from wm_middleware._redis.encoding import canonical_key, key_from_canonical
from wm_middleware._redis.protocol import Layout

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


class NamedScope(NamedTuple):
    """The shape the adapters' scopes may take as a NamedTuple (same positions as the tuple)."""

    kind: str
    tenant: tuple[str, str]


@pytest.mark.parametrize(
    ("scope", "tenant"),
    [
        (("tenant", ("https://x", "fp")), ("https://x", "fp")),
        (("tag", ("https://x", "fp"), "user-1"), ("https://x", "fp")),
        (("untagged", ("https://x", "fp")), ("https://x", "fp")),
        (NamedScope("tenant", ("https://x", "fp")), ("https://x", "fp")),
        ("a normalised query", None),
        (("tag", "not a tenant", "user-1"), None),
        (("other", ("https://x", "fp")), None),
        (("tag", ("https://x", "fp")), None),  # a tag scope names its tag
    ],
)
def test_one_reading_of_a_tenant_serves_the_adapters_and_the_tier(
    scope: Hashable, tenant: object
) -> None:
    parsed = TenantScope.parse(scope)
    assert (None if parsed is None else parsed.tenant) == tenant
    layout, alone = Layout("wm", None, 30.0, False), Layout("wm", None, 30.0, False)
    plan = layout.plan("q", (scope,), 60.0)
    assert plan is not None
    if tenant is None:
        assert plan.tenant == "wm"  # the namespace: no tenant named
    else:
        assert plan.tenant == layout.tenant(scope) == alone.tenant(("tenant", tenant))


def test_a_named_tuple_scope_names_the_same_redis_key_as_its_tuple() -> None:
    named = NamedScope("tenant", ("https://x", "fp"))
    assert canonical_key(named) == canonical_key(("tenant", ("https://x", "fp")))
