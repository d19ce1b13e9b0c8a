"""What makes two lookups the same entry, and what keeps them apart."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wm_middleware import WorkingMemory

from ..conftest import FakeClock


@pytest.fixture
def wm(clock: FakeClock) -> WorkingMemory[str]:
    return WorkingMemory(clock=clock)


@pytest.mark.parametrize(
    "variant", ["user prefs", "  user prefs  ", "user   prefs", "user\t\nprefs"]
)
def test_whitespace_is_normalised(wm: WorkingMemory[str], variant: str) -> None:
    wm.set("user prefs", "v")
    assert wm.get(variant) == "v"


# search() probes the store with a str query as given before normalising it: a query in normal
# form is its own key. Whatever the spelling, the entry and the counts must be those of the
# normal form.
@pytest.mark.parametrize("variant", ["  user prefs  ", "user   prefs", "user\t\nprefs"])
def test_a_query_not_in_normal_form_hits_the_entry_of_its_normal_form(
    wm: WorkingMemory[str], variant: str
) -> None:
    async def refetch() -> str:
        raise AssertionError("a hit fetches nothing")

    wm.set("user prefs", "v")
    assert wm.search(variant, lambda: "refetched") == "v"
    assert asyncio.run(wm.asearch(variant, refetch)) == "v"
    stats = wm.stats()
    assert (stats.hits, stats.misses) == (2, 0)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_query_not_in_normal_form_is_stored_under_its_normal_form(asynchronous: bool) -> None:
    wm: WorkingMemory[str] = WorkingMemory()

    async def fetch() -> str:
        return "fetched"

    if asynchronous:
        assert asyncio.run(wm.asearch("  user   prefs ", fetch)) == "fetched"
    else:
        assert wm.search("  user   prefs ", lambda: "fetched") == "fetched"
    assert wm.has("user prefs")
    assert len(wm) == 1
    assert wm.search("user prefs", lambda: "refetched") == "fetched"
    stats = wm.stats()
    assert (stats.hits, stats.misses) == (1, 1)


def test_a_query_in_normal_form_that_is_not_stored_is_fetched_once(wm: WorkingMemory[str]) -> None:
    calls: list[str] = []

    def fetch() -> str:
        calls.append("fetch")
        return "v"

    assert wm.search("user prefs", fetch) == "v"
    assert wm.search("user prefs", fetch) == "v"
    assert calls == ["fetch"]
    assert (wm.stats().hits, wm.stats().misses) == (1, 1)


@pytest.mark.parametrize("query", [42, ("family", "key")])
def test_a_query_that_is_not_a_str_is_refused_even_if_a_key_level_entry_has_it_as_key(
    wm: WorkingMemory[str], query: object
) -> None:
    # The key-level interface takes any hashable key; a search must still refuse the query.
    wm.load(query, lambda: "by key")
    with pytest.raises(TypeError, match="query must be a str"):
        wm.search(query, lambda: "v")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="query must be a str"):
        asyncio.run(wm.asearch(query, lambda: asyncio.sleep(0, "v")))  # type: ignore[arg-type]


def test_case_is_kept(wm: WorkingMemory[str]) -> None:
    wm.set("User Prefs", "v")
    assert wm.get("user prefs") is None


def test_params_are_part_of_the_key_and_order_independent(wm: WorkingMemory[str]) -> None:
    wm.set("q", "five", limit=5, container_tags=["user-1"])
    assert wm.get("q", container_tags=["user-1"], limit=5) == "five"
    assert wm.get("q", limit=5) is None
    assert wm.get("q", limit=6, container_tags=["user-1"]) is None
    assert wm.get("q", limit=5, container_tags=["user-2"]) is None
    assert wm.get("q") is None


def test_nested_dicts_are_order_independent(wm: WorkingMemory[str]) -> None:
    wm.set("q", "v", filters={"AND": [{"key": "a", "value": "1"}], "x": {"b": 2, "a": 1}})
    assert wm.get("q", filters={"x": {"a": 1, "b": 2}, "AND": [{"value": "1", "key": "a"}]}) == "v"


def test_list_order_matters(wm: WorkingMemory[str]) -> None:
    wm.set("q", "v", container_tags=["a", "b"])
    assert wm.get("q", container_tags=["b", "a"]) is None
    assert wm.get("q", container_tags=("a", "b")) == "v"  # a tuple is the same JSON as a list


def test_true_is_not_one(wm: WorkingMemory[str]) -> None:
    wm.set("q", "bool", rerank=True)
    assert wm.get("q", rerank=1) is None
    assert wm.get("q", rerank=True) == "bool"


def test_set_params_are_order_independent(wm: WorkingMemory[str]) -> None:
    wm.set("q", "v", include={"documents", "summaries"})
    assert wm.get("q", include={"summaries", "documents"}) == "v"


def test_unhashable_parameter_is_refused_clearly(wm: WorkingMemory[str]) -> None:
    class Opaque:
        __hash__ = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match="JSON-like"):
        wm.get("q", thing=Opaque())


def test_hashable_custom_values_are_kept_apart_by_type(wm: WorkingMemory[str]) -> None:
    wm.set("q", "v", mode=frozenset({1}))
    assert wm.get("q", mode=frozenset({1})) == "v"
    assert wm.get("q", mode="x") is None


# -- the parameters search() names: container_tags and limit ----------------------------------
# search() and asearch() take these two as named arguments and memoise their key from the
# arguments as they come. Whatever way a parameter arrives, it must make the entry ``get`` and
# ``set`` (which freeze ``**params`` afresh every time) make of it.
_ABSENT = object()
_LIMIT_VALUES = [_ABSENT, 1, 5, True, False, 1.0, 5.0, 0, None, "5", [5]]
_TAG_VALUES = [
    _ABSENT,
    [],
    (),
    ["a"],
    ("a",),
    ["a", "b"],
    ["b", "a"],
    ["a b"],
    ["a", "b", "c"],
    "a",
    "ab",
    ["ab"],
    [1],
    ["1"],
    [True],
    [None],
    {"a"},
    None,
]
_LIMITS = st.sampled_from(_LIMIT_VALUES)
_TAGS = st.sampled_from(_TAG_VALUES)
_QUERIES = st.sampled_from(["q", " q ", "q  r", "q r", "Q"])
_OTHERS = st.sampled_from([{}, {}, {"threshold": 0.5}, {"rerank": True}])


def _params(tags: object, limit: object, others: dict[str, object]) -> dict[str, object]:
    params = dict(others)
    if tags is not _ABSENT:
        params["container_tags"] = tags
    if limit is not _ABSENT:
        params["limit"] = limit
    return params


@settings(max_examples=400, deadline=None)
@given(
    stored=st.tuples(_QUERIES, _TAGS, _LIMITS, _OTHERS),
    asked=st.lists(st.tuples(_QUERIES, _TAGS, _LIMITS, _OTHERS), min_size=1, max_size=6),
)
def test_named_parameters_make_the_entry_get_and_set_make(
    stored: tuple[str, object, object, dict[str, object]],
    asked: list[tuple[str, object, object, dict[str, object]]],
) -> None:
    wm: WorkingMemory[str] = WorkingMemory()
    query, tags, limit, others = stored
    wm.set(query, "stored", **_params(tags, limit, others))
    for _ in range(2):  # the second round is served by the memo
        for query, tags, limit, others in asked:
            params = _params(tags, limit, others)
            expected = wm.get(query, **params) or "fetched"
            assert wm.search(query, lambda: "fetched", **params) == expected
            if expected == "fetched":
                wm.invalidate(query, **params)  # keep the stored entry the only one


@settings(max_examples=100, deadline=None)
@given(stored=st.tuples(_QUERIES, _TAGS, _LIMITS), asked=st.tuples(_QUERIES, _TAGS, _LIMITS))
def test_asearch_takes_the_named_parameters_alike(
    stored: tuple[str, object, object], asked: tuple[str, object, object]
) -> None:
    async def fetch() -> str:
        return "fetched"

    async def scenario() -> None:
        wm: WorkingMemory[str] = WorkingMemory()
        wm.set(stored[0], "stored", **_params(stored[1], stored[2], {}))
        params = _params(asked[1], asked[2], {})
        expected = wm.get(asked[0], **params) or "fetched"
        for _ in range(2):
            assert await wm.asearch(asked[0], fetch, **params) == expected

    asyncio.run(scenario())


@pytest.mark.parametrize("extra", [(5,), (5.0, ["user-1"]), (5.0, ["user-1"], 3)])
def test_options_never_come_by_position(wm: WorkingMemory[str], extra: tuple[object, ...]) -> None:
    # ``wm.search("q", fetch, 5)`` once set the ttl where a reader expects a limit.
    with pytest.raises(TypeError, match="positional"):
        wm.search("q", lambda: "v", *extra)  # type: ignore[misc]
    with pytest.raises(TypeError, match="positional"):
        asyncio.run(wm.asearch("q", lambda: asyncio.sleep(0, "v"), *extra))  # type: ignore[misc]
    assert not wm.has("q")


def test_ttl_container_tags_and_limit_by_keyword(wm: WorkingMemory[str], clock: FakeClock) -> None:
    assert wm.search("q", lambda: "v", ttl=5.0, container_tags=["user-1"], limit=3) == "v"
    assert wm.get("q", container_tags=["user-1"], limit=3) == "v"
    clock.advance(5.0)
    assert wm.get("q", container_tags=["user-1"], limit=3) is None


def test_a_tag_list_changed_after_the_call_does_not_change_the_entry(
    wm: WorkingMemory[str],
) -> None:
    tags = ["user-1"]
    wm.search("q", lambda: "one", container_tags=tags, limit=5)
    tags.append("user-2")
    assert wm.search("q", lambda: "two", container_tags=tags, limit=5) == "two"
    assert wm.search("q", lambda: "x", container_tags=["user-1"], limit=5) == "one"
    assert wm.search("q", lambda: "x", container_tags=["user-1", "user-2"], limit=5) == "two"


def test_a_bad_query_is_refused_the_same_way_with_named_parameters(
    wm: WorkingMemory[str],
) -> None:
    for query in (["q"], 5, None):
        with pytest.raises(TypeError, match="query must be a str"):
            wm.search(query, lambda: "v", limit=5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="query must be a str"):
            wm.search(query, lambda: "v", container_tags=["t"])  # type: ignore[arg-type]


def test_the_key_memo_stays_bounded_whatever_the_callers_send() -> None:
    wm: WorkingMemory[int] = WorkingMemory(max_entries=10)
    memo = wm._keys
    for i in range(5_000):
        wm.search("q", lambda i=i: i, container_tags=[f"user-{i}"], limit=i)  # type: ignore[misc]
        wm.search("q", lambda i=i: i, limit=i, threshold=0.5)  # type: ignore[misc]
    assert len(memo) <= 3 * 64
    wm.search("q", lambda: 0, container_tags=["x" * 2_000], limit=1)
    assert not any("x" * 2_000 in str(stand_in) for stand_in in memo._named)


def test_no_two_named_argument_spellings_share_a_memo_slot_unless_their_keys_are_equal() -> None:
    # Every ordered pair of spellings, the first one memoised: the second finds the first's
    # entry exactly when get() (no memo) says the keys are equal.
    spellings = [
        _params(tags, limit, {})
        for tags in _TAG_VALUES
        for limit in _LIMIT_VALUES
        if tags is not _ABSENT or limit is not _ABSENT
    ]
    for first in spellings:
        wm: WorkingMemory[str] = WorkingMemory(max_entries=1)
        wm.search("q", lambda: "first", **first)
        for second in spellings:
            expected = wm.get("q", **second) or "second"
            assert wm.search("q", lambda: "second", **second) == expected, (first, second)
            if expected == "second":
                wm.set("q", "first", **first)  # max_entries=1: the first one back in
