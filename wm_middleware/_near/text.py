"""A query read as words, and its lexical form.

The lexical form is what two queries must share to match without an embedder: the text in
Unicode NFKC, case folded, punctuation stripped, word order kept, plus three normalisations that
change no meaning a memory search can see:

* contractions are spelled out (``what's`` -> ``what is``, ``can't`` -> ``can not``), so the
  negation stays a word of its own;
* hesitations (``um``, ``uh``, ``er``) are dropped wherever they are;
* greetings and discourse openers at the start (``hi``, ``so``, ``quick question``) and thanks at
  the end (``please``, ``thanks``, ``cheers``) are dropped, never the whole query.

:class:`Words` keeps the case and the sentence starts the vetoes need beside the folded form.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

__all__ = ["Words", "lexical_form", "words"]

# A number (with inner separators and an ordinal suffix), or a word with inner apostrophes.
_TOKEN: Final = re.compile(r"\d+(?:[.,:]\d+)*(?:st|nd|rd|th)?|[^\W\d_]+(?:['\u2019][^\W\d_]+)*")
_QUOTED: Final = re.compile(r"\"([^\"]+)\"|“([^”]+)”|«([^»]+)»|`([^`]+)`|(?<!\w)'([^']+)'(?!\w)")
_SENTENCE_END: Final = frozenset(".!?:;")

_CONTRACTIONS: Final = {
    "can't": "can not",
    "cannot": "can not",
    "cant": "can not",
    "won't": "will not",
    "shan't": "shall not",
    "ain't": "is not",
    "let's": "let us",
    "whats": "what is",
    "wheres": "where is",
    "whos": "who is",
    "hows": "how is",
    "dont": "do not",
    "doesnt": "does not",
    "didnt": "did not",
    "isnt": "is not",
    "arent": "are not",
    "wasnt": "was not",
    "werent": "were not",
    "havent": "have not",
    "hasnt": "has not",
}
_IS_AFTER: Final = frozenset(
    {"what", "where", "who", "how", "when", "why", "that", "there", "here", "it", "he", "she"}
)
_SUFFIXES: Final = (("n't", " not"), ("'re", " are"), ("'ve", " have"), ("'ll", " will"),
                    ("'m", " am"), ("'d", " would"))  # fmt: skip

_HESITATIONS: Final = frozenset({"um", "umm", "uh", "uhh", "uhm", "er", "erm", "hmm", "ah"})
_OPENERS: Final = (
    ("sorry", "to", "bother", "you", "but"),
    ("sorry", "silly", "question", "but"),
    ("hello", "there"),
    ("hi", "there"),
    ("hi", "team"),
    ("good", "morning"),
    ("quick", "question"),
    ("quick", "one"),
    ("just", "wondering"),
    ("hi",),
    ("hiya",),
    ("hello",),
    ("hey",),
    ("morning",),
    ("so",),
    ("okay",),
    ("ok",),
    ("yeah",),
)
_CLOSERS: Final = (
    ("thanks", "in", "advance"),
    ("many", "thanks"),
    ("thank", "you"),
    ("thanks",),
    ("cheers",),
    ("please",),
)


class Words:
    """One query as the vetoes and the lexical form see it.

    ``tokens``: the words in order, case kept; ``folded``: the same case folded; ``initial``:
    whether each starts a sentence; ``quoted``: the quoted strings, folded; ``cased``: the text
    tells names from other words by case (neither all capitals nor every word capitalised).
    """

    __slots__ = ("cased", "folded", "initial", "quoted", "text", "tokens")

    def __init__(self, text: str) -> None:
        normal = unicodedata.normalize("NFKC", text)
        self.text = text
        self.quoted = tuple(
            " ".join(next(part for part in found if part).casefold().split())
            for found in _QUOTED.findall(normal)
        )
        spelled = [(word, initial) for token, initial in _tokens(normal) for word in _spell(token)]
        kept = _trimmed(spelled) or spelled
        self.tokens = tuple(word for word, _ in kept)
        self.initial = tuple(initial for _, initial in kept)
        self.folded = tuple(word.casefold() for word in self.tokens)
        letters = [word for word in self.tokens if word[0].isalpha()]
        self.cased = any(word[0].islower() for word in letters) and any(
            not word.isupper() for word in letters
        )

    @property
    def form(self) -> str:
        """The lexical form: the folded words, one space apart."""
        return " ".join(self.folded)

    def __repr__(self) -> str:
        return f"Words({self.form!r})"


def words(text: str) -> Words:
    """``text`` read as :class:`Words`."""
    return Words(text)


def lexical_form(text: str) -> str:
    """The lexical form of ``text`` (see the module docstring): equal forms, same query."""
    return Words(text).form


def _tokens(text: str) -> list[tuple[str, bool]]:
    """The tokens of ``text``, each with whether it starts a sentence."""
    found: list[tuple[str, bool]] = []
    for match in _TOKEN.finditer(text):
        before = text[: match.start()].rstrip()
        found.append(
            (match.group().replace("\u2019", "'"), not before or before[-1] in _SENTENCE_END)
        )
    return found


def _spell(token: str) -> list[str]:
    """A token with its contraction spelled out, its possessive apostrophe dropped."""
    lower = token.lower()
    whole = _CONTRACTIONS.get(lower)
    if whole is not None:
        return _cased(token, whole).split()
    if lower.endswith("'s"):
        stem = token[:-2]
        return [stem, "is"] if stem.lower() in _IS_AFTER else [stem + token[-1]]
    for suffix, spelled in _SUFFIXES:
        if lower.endswith(suffix) and len(lower) > len(suffix):
            stem = token[: -len(suffix)]
            if suffix == "n't" and stem.lower() in ("ca", "wo", "sha"):
                continue  # spelled whole above
            return [stem, spelled.strip()]
    return [token.replace("'", "")]


def _cased(token: str, spelled: str) -> str:
    return spelled[0].upper() + spelled[1:] if token[:1].isupper() else spelled


def _trimmed(tokens: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """``tokens`` without hesitations, openers at the start or thanks at the end."""
    kept = [(word, initial) for word, initial in tokens if word.lower() not in _HESITATIONS]
    start, end = 0, len(kept)
    folded = [word.lower() for word, _ in kept]
    moved = True
    while moved:
        moved = False
        for opener in _OPENERS:
            if tuple(folded[start : start + len(opener)]) == opener and start + len(opener) < end:
                start += len(opener)
                moved = True
                break
        for closer in _CLOSERS:
            if tuple(folded[end - len(closer) : end]) == closer and end - len(closer) > start:
                end -= len(closer)
                moved = True
                break
    trimmed = kept[start:end]
    if trimmed and start:
        trimmed[0] = (trimmed[0][0], True)  # the first word kept starts the query
    return trimmed
