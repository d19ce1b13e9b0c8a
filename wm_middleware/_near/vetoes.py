"""The vetoes: rules that refuse a near-duplicate whatever its similarity.

Embeddings place "meetings with Alice last week" next to "... next week", and "the user likes
tea" next to "... does not like tea": a one-word change of meaning scores like a paraphrase. Each
rule below names one such change and refuses any pair of queries that differ in it; a rule errs
on the side of refusing, as a refused candidate costs a fetch and a wrong one serves another
fact. :data:`VETOES` is the table, in the order they are tried; the first that refuses is the one
reported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Final

from .text import Words

__all__ = ["VETOES", "Veto"]


class Veto:
    """A rule that refuses a pair of queries: ``name`` (reported), ``meaning``, ``refuses``.

    ``refuses(a, b)`` takes the two queries as :class:`~wm_middleware._near.text.Words` and is
    true when they differ in what the rule guards.
    """

    __slots__ = ("meaning", "name", "refuses")

    def __init__(self, name: str, meaning: str, refuses: Callable[[Words, Words], bool]) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a veto's name must be a non-empty str, got {name!r}")
        if not callable(refuses):
            raise TypeError(f"refuses must be callable, not {type(refuses).__name__}")
        self.name = name
        self.meaning = meaning
        self.refuses = refuses

    def __repr__(self) -> str:
        return f"Veto({self.name!r})"


def _differ(features: Callable[[Words], Iterable[object]]) -> Callable[[Words, Words], bool]:
    """A rule refusing two queries whose ``features`` (as multisets) differ."""

    def refuses(a: Words, b: Words) -> bool:
        return Counter(features(a)) != Counter(features(b))

    return refuses


def _listed(text: str) -> tuple[str, ...]:
    """The words of ``text``: the tables below list words one space apart."""
    return tuple(text.split())


def _plain(word: str) -> str:
    """A folded word without a plural ``s`` (``mondays`` -> ``monday``)."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


# -- numbers ----------------------------------------------------------------------------------
_NUMBER_WORDS: Final = {
    word: str(value)
    for value, word in enumerate(
        _listed(
            "zero one two three four five six seven eight nine ten eleven twelve thirteen "
            "fourteen fifteen sixteen seventeen eighteen nineteen twenty"
        )
    )
}
_NUMBER_WORDS.update(
    {"thirty": "30", "forty": "40", "fifty": "50", "sixty": "60", "seventy": "70"}
    | {"eighty": "80", "ninety": "90", "hundred": "100", "thousand": "1000"}
    | {"million": "1e6", "billion": "1e9", "dozen": "12", "half": "0.5", "once": "1x"}
    | {"twice": "2x", "couple": "2", "pair": "2", "single": "1"}
)
_ORDINALS: Final = {
    word: f"{value}th"
    for value, word in enumerate(
        _listed("zeroth first second third fourth fifth sixth seventh eighth ninth tenth")
    )
}


def _numbers(query: Words) -> Iterable[str]:
    for word in query.folded:
        if word[0].isdigit():
            digits = word.replace(",", "")
            yield digits[:-2] + "th" if digits[-2:] in ("st", "nd", "rd") else digits
        elif word in _NUMBER_WORDS:
            yield _NUMBER_WORDS[word]
        elif word in _ORDINALS:
            yield _ORDINALS[word]


# -- dates and times --------------------------------------------------------------------------
_DATE_WORDS: Final = frozenset(
    _listed(
        "monday tuesday wednesday thursday friday saturday sunday weekend weekday today tonight "
        "tomorrow yesterday morning afternoon evening night noon midnight hour minute day week "
        "fortnight month year decade quarter season spring summer autumn winter last next "
        "previous past upcoming recent recently ago earlier later soon now lately january "
        "february april june july august september october november december jan feb apr jun jul "
        "aug sep sept oct nov dec daily weekly monthly yearly annual annually hourly"
    )
)
_CASED_MONTHS: Final = frozenset({"may", "march"})  # months only when capitalised


def _dates(query: Words) -> Iterable[str]:
    for word, folded in zip(query.tokens, query.folded, strict=True):
        plain = _plain(folded)
        if plain in _DATE_WORDS or (folded in _CASED_MONTHS and word[0].isupper()):
            yield plain


# -- negation and opposites ---------------------------------------------------------------------
_NEGATIONS: Final = frozenset(
    _listed("not no never none nothing nobody nowhere neither nor without lack lacks")
)
_OPPOSITES: Final = (
    ("open", "closed"), ("open", "close"), ("on", "off"), ("allow", "ban"), ("allowed", "banned"),
    ("include", "exclude"), ("included", "excluded"), ("accept", "reject"), ("add", "remove"),
    ("enable", "disable"), ("start", "stop"), ("increase", "decrease"), ("raise", "lower"),
    ("more", "less"), ("before", "after"), ("like", "hate"), ("love", "hate"), ("eat", "avoid"),
    ("always", "never"), ("true", "false"), ("yes", "no"), ("up", "down"), ("buy", "sell"),
    ("win", "lose"), ("pass", "fail"), ("import", "export"), ("upload", "download"),
    ("min", "max"), ("minimum", "maximum"), ("highest", "lowest"), ("best", "worst"),
    ("early", "late"), ("earliest", "latest"), ("oldest", "newest"), ("old", "new"),
    ("join", "leave"), ("private", "public"), ("safe", "dangerous"), ("agree", "disagree"),
    ("success", "failure"), ("succeeded", "failed"), ("approve", "deny"), ("cheap", "expensive"),
    ("cheapest", "dearest"), ("fast", "slow"), ("fastest", "slowest"), ("hot", "cold"),
    ("arrive", "depart"), ("arrival", "departure"), ("inbound", "outbound"), ("in", "out"),
    ("favourite", "least"), ("favorite", "least"), ("prefer", "avoid"), ("likes", "hates"),
    ("pros", "cons"), ("advantages", "disadvantages"), ("with", "without"),
)  # fmt: skip
_PREFIXES: Final = ("un", "dis", "in", "im", "il", "ir", "non", "de")


def _negations(query: Words) -> Iterable[str]:
    return (word for word in query.folded if word in _NEGATIONS)


def _opposed(a: Words, b: Words) -> bool:
    """True when a word of one query is the opposite of a word of the other."""
    only_a, only_b = set(a.folded) - set(b.folded), set(b.folded) - set(a.folded)
    for first, second in _OPPOSITES:
        if (first in only_a and second in only_b) or (second in only_a and first in only_b):
            return True
    for word in only_a:
        for other in only_b:
            for prefix in _PREFIXES:
                if word == prefix + other or other == prefix + word:
                    return True
    return False


def _negated(a: Words, b: Words) -> bool:
    return Counter(_negations(a)) != Counter(_negations(b)) or _opposed(a, b)


# -- names ----------------------------------------------------------------------------------------
_COMMON: Final = frozenset(
    _listed(
        "a an the this that these those what which who whom whose when where why how is are was "
        "were be been do does did can could will would shall should may might must have has had "
        "i me my we us our you your he him his she her they them their it its there here and or "
        "but if so as at by for from in into of on to with about any all some each every no not "
        "tell show find list get give search look recall remember summarise summarize fetch "
        "check please let hi hello hey ok okay yes yeah"
    )
)


def _names(query: Words) -> set[str]:
    """The capitalised words of a query that tells names by case (``I`` and sentence-opening
    common words aside)."""
    if not query.cased:
        return set()
    return {
        folded
        for word, folded, initial in zip(query.tokens, query.folded, query.initial, strict=True)
        if word[0].isupper() and word != "I" and not (initial and folded in _COMMON)
    }


def _named(a: Words, b: Words) -> bool:
    """A name of one query is not a word of the other."""
    return not (_names(a) <= set(b.folded) and _names(b) <= set(a.folded))


# -- who is asked about ---------------------------------------------------------------------------
_PERSONS: Final = {
    **dict.fromkeys(("i", "me", "my", "mine", "myself"), "1s"),
    **dict.fromkeys(("we", "us", "our", "ours", "ourselves"), "1p"),
    **dict.fromkeys(("you", "your", "yours", "yourself", "yourselves"), "2"),
    **dict.fromkeys(("he", "him", "his", "himself"), "3m"),
    **dict.fromkeys(("she", "her", "hers", "herself"), "3f"),
    **dict.fromkeys(("they", "them", "their", "theirs", "themselves"), "3p"),
}


def _persons(query: Words) -> set[str]:
    return {_PERSONS[word] for word in query.folded if word in _PERSONS}


def _other_person(a: Words, b: Words) -> bool:
    return _persons(a) != _persons(b)


# -- time frame -----------------------------------------------------------------------------------
_TENSES: Final = {
    **dict.fromkeys(("did", "was", "were", "had", "used", "previously", "formerly"), "past"),
    **dict.fromkeys(("will", "shall", "gonna", "going"), "future"),
}
_INFLECTIONS: Final = ("ing", "ed", "es", "s", "d")


def _stem(word: str) -> tuple[str, str]:
    for suffix in _INFLECTIONS:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)], suffix
    return word, ""


def _retensed(a: Words, b: Words) -> bool:
    """The time frames differ: a tense word, or one verb in two tenses (``liked``/``likes``)."""
    if {_TENSES[w] for w in a.folded if w in _TENSES} != {
        _TENSES[w] for w in b.folded if w in _TENSES
    }:
        return True
    only_b = {_stem(word) for word in set(b.folded) - set(a.folded)}
    for word in set(a.folded) - set(b.folded):
        stem, suffix = _stem(word)
        for other, other_suffix in only_b:
            if stem == other and "ed" in (suffix, other_suffix) and suffix != other_suffix:
                return True
    return False


# -- scope ----------------------------------------------------------------------------------------
_QUANTIFIERS: Final = frozenset(
    _listed(
        "all every each any some only most many few several both either whole entire latest "
        "newest oldest first last recent current previous other another"
    )
)


def _quantifiers(query: Words) -> Iterable[str]:
    return (word for word in query.folded if word in _QUANTIFIERS)


def _rescoped(a: Words, b: Words) -> bool:
    """The scope differs: a quantifier, or one noun in the singular and the plural."""
    if Counter(_quantifiers(a)) != Counter(_quantifiers(b)):
        return True
    only_b = set(b.folded) - set(a.folded)
    for word in set(a.folded) - set(b.folded):
        for other in only_b:
            short, long = (word, other) if len(word) < len(other) else (other, word)
            if long in (short + "s", short + "es") or (
                short.endswith("y") and long == short[:-1] + "ies"
            ):
                return True
    return False


VETOES: Final[tuple[Veto, ...]] = (
    Veto("quoted", "the quoted strings differ", _differ(lambda query: query.quoted)),
    Veto("number", "the numbers differ (digits, number words, ordinals)", _differ(_numbers)),
    Veto("date", "the dates or times differ (days, months, last/next week, ago)", _differ(_dates)),
    Veto("negation", "one negates or says the opposite of what the other says", _negated),
    Veto("name", "a capitalised name of one is not in the other", _named),
    Veto("person", "they ask about another person (my/her/their...)", _other_person),
    Veto("tense", "the time frame differs (did/does/will, liked/likes)", _retensed),
    Veto("scope", "the scope differs (all/some/latest, order/orders)", _rescoped),
)
"""Every rule, in the order they are tried."""
