"""The offline gate: the lexical form, each veto by kind, ``would_reuse`` and the bound."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from wm_middleware import SemanticReuse as Exported
from wm_middleware._core.stats import CacheStats
from wm_middleware.semantic import (
    VETOES,
    NearMatch,
    SemanticReuse,
    Veto,
    lexical_form,
    report,
    upper_bound,
    would_reuse,
)


def same_vector(texts: Sequence[str]) -> list[list[float]]:
    return [[0.6, 0.8] for _ in texts]


NEAR = SemanticReuse(embed=same_vector)  # every pair is near: only the vetoes refuse


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("User preferences", "user preferences?"),
        ("What's the user's favourite drink?", "what is the users favourite drink"),
        ("I can't log in", "I cannot log in"),
        ("  Do you accept Apple Pay?", "DO YOU ACCEPT APPLE PAY"),
        ("\uff35\uff53\uff45\uff52  \uff50\uff52\uff45\uff46", "user pref"),  # NFKC: fullwidth
        ("Hi there, quick question: where does the user live? Thanks!", "Where does the user live"),
        ("um so what does the user uh like", "what does the user like"),
    ],
)
def test_the_lexical_form_matches_rewordings_that_change_no_meaning(a: str, b: str) -> None:
    assert lexical_form(a) == lexical_form(b)
    assert would_reuse(a, b) == NearMatch(True, 1.0, None)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("user preferences", "preferences user"),  # word order is kept
        ("what does the user like", "what does the user not like"),
        ("thanks", "please"),  # never the whole query
        ("what did the user say thanks for", "what did the user say for"),
    ],
)
def test_the_lexical_form_keeps_what_could_change_an_answer(a: str, b: str) -> None:
    assert lexical_form(a) != lexical_form(b)
    assert not would_reuse(a, b).candidate


@pytest.mark.parametrize(
    ("veto", "refused", "allowed"),
    [
        ("quoted", ('notes titled "Q3 plan"', 'notes titled "Q4 plan"'), ("a 'b'", "a 'b'")),
        ("number", ("order 48213", "order 48231"), ("two cats", "2 cats")),
        ("number", ("the first meeting", "the second meeting"), ("1st meeting", "first meeting")),
        ("date", ("meetings last week", "meetings next week"), ("on Mondays", "on monday")),
        ("date", ("what happened in May", "what happened in June"), ("may I see", "can I see")),
        ("negation", ("the user likes tea", "the user doesn't like tea"), ("no", "no")),
        ("negation", ("is the clinic open", "is the clinic closed"), ("open", "opening")),
        ("negation", ("is it safe", "is it unsafe"), ("safe", "safe")),
        ("name", ("meetings with Alice", "meetings with Bob"), ("Alice notes", "alice notes")),
        ("name", ("Alice's projects", "Bob's projects"), ("What projects", "which projects")),
        ("person", ("my preferences", "her preferences"), ("my plans", "my plans")),
        ("tense", ("what did the user like", "what does the user like"), ("likes", "likes")),
        ("tense", ("drinks the user liked", "drinks the user likes"), ("liked", "liked")),
        ("scope", ("all my orders", "my latest order"), ("orders", "orders")),
        ("scope", ("my order", "my orders"), ("a policy", "a policy")),
    ],
)
def test_each_veto_refuses_its_change_of_meaning(
    veto: str, refused: tuple[str, str], allowed: tuple[str, str]
) -> None:
    found = would_reuse(*refused, semantic=NEAR)
    assert found.veto == veto
    assert not found.candidate
    rule = next(rule for rule in VETOES if rule.name == veto)
    from wm_middleware._near.text import words

    assert not rule.refuses(words(allowed[0]), words(allowed[1]))


def test_a_pair_below_the_threshold_is_no_candidate_and_no_veto_is_named() -> None:
    def apart(texts: Sequence[str]) -> list[list[float]]:
        return [[1.0, 0.0], [0.0, 1.0]][: len(texts)]

    found = would_reuse(
        "meetings with Alice", "meetings with Bob", semantic=SemanticReuse(embed=apart)
    )
    assert found == NearMatch(False, 0.0, None)


def test_vetoes_can_be_chosen_or_switched_off() -> None:
    pair = ("meetings with Alice", "meetings with Bob")
    assert would_reuse(*pair, semantic=SemanticReuse(embed=same_vector, vetoes=())).candidate
    own = Veto("bob", "Bob is special", lambda a, b: "bob" in a.folded + b.folded)
    chosen = SemanticReuse(embed=same_vector, vetoes=(own,))
    assert would_reuse(*pair, semantic=chosen).veto == "bob"


@pytest.mark.parametrize(
    ("options", "error", "named"),
    [
        ({"embed": "openai"}, TypeError, "embed"),
        ({"min_similarity": 0}, ValueError, "min_similarity"),
        ({"min_similarity": 1.5}, ValueError, "min_similarity"),
        ({"min_similarity": True}, TypeError, "min_similarity"),
        ({"vetoes": "name"}, TypeError, "vetoes"),
        ({"timeout": 0}, ValueError, "timeout"),
    ],
)
def test_bad_arguments_are_refused_by_name(
    options: dict[str, object], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        SemanticReuse(**options)  # type: ignore[arg-type]


def test_a_bad_embedding_is_an_error_not_a_match() -> None:
    with pytest.raises(ValueError, match="vector"):
        would_reuse("a", "b", semantic=SemanticReuse(embed=lambda texts: [[0.0, 0.0]] * 2))
    with pytest.raises(ValueError, match="1 vector"):
        would_reuse("a", "b", semantic=SemanticReuse(embed=lambda texts: [[1.0]]))
    with pytest.raises(TypeError, match="b must be a str"):
        would_reuse("a", None)  # type: ignore[arg-type]


def test_the_default_configuration_is_public_and_equal_to_itself() -> None:
    assert Exported is SemanticReuse
    assert SemanticReuse() == SemanticReuse()
    assert hash(SemanticReuse()) == hash(SemanticReuse())
    assert SemanticReuse(embed=same_vector) != SemanticReuse()


def test_the_clopper_pearson_upper_bound() -> None:
    assert upper_bound(0, 300) == pytest.approx(1 - 0.05 ** (1 / 300), rel=1e-6)  # 0.99%
    assert upper_bound(0, 300) <= 0.01
    assert upper_bound(1, 100) == pytest.approx(0.0466, abs=1e-4)  # tabulated
    assert upper_bound(5, 5) == 1.0
    assert upper_bound(0, 0) == 1.0
    with pytest.raises(ValueError, match="failures"):
        upper_bound(3, 2)


def test_the_report_line_says_what_serving_would_have_saved_and_risked() -> None:
    stats = CacheStats(misses=120, near_candidates=31, near_agreed=30, near_disagreed=1)
    line = str(report(stats))
    assert line.startswith("of 120 misses, 31 had a candidate: 30 agreed, 1 disagreed")
    assert f"{upper_bound(1, 31):.1%}" in line
    assert "saved 25.0% of misses (30 fetches) and risked 1 wrong answers" in line


@pytest.mark.parametrize(
    ("path", "field"), [("/v4/search", "q"), ("/v3/search", "q"), ("/ns/user-1/search", "query")]
)
def test_the_httpx_transport_keys_have_a_partition_without_the_query(path: str, field: str) -> None:
    import httpx

    from wm_middleware._adapters.httpx_transport import describe
    from wm_middleware._near.answers import partition_of

    def partition(body: dict[str, object], key: str = "sk-a") -> object:
        request = httpx.Request(
            "POST", f"https://api.example{path}", json=body, headers={"x-api-key": key}
        )
        spec = describe(request)
        assert spec is not None
        return partition_of(spec.key, spec.query)  # type: ignore[union-attr]

    tea = partition({field: "green tea", "limit": 5})
    assert tea is not None
    assert partition({field: "coffee", "limit": 5}) == tea
    assert partition({field: "coffee", "limit": 6}) != tea
    assert partition({field: "coffee", "limit": 5}, key="sk-b") != tea
