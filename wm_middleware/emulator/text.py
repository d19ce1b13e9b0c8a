"""Dependency-free lexical ranking used by the emulator.

Contract:

* :func:`tokenize` lower-cases, splits on non-alphanumerics, drops a small English
  stop-word list and applies a light suffix stemmer, so ``"allergies"`` and
  ``"allergy"`` share the token ``"allergy"``.
* :func:`rank` scores candidate texts against a query with BM25 term weights and
  maps each score into ``[0, 1]``: the idf-weighted fraction of query terms a text
  covers, scaled by a saturating BM25 strength factor. A text sharing no term with
  the query scores exactly ``0.0``; identical texts score close to ``1.0``.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["rank", "split_sentences", "stem", "tokenize"]

_TOKEN_RE = re.compile(r"[a-z0-9]+")
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n+")

STOP_WORDS: frozenset[str] = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "hers",
        "him",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "mine",
        "of",
        "on",
        "or",
        "our",
        "ours",
        "she",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "about",
        "any",
        "all",
        "also",
        "just",
        "not",
        "no",
        "yes",
        "please",
        "tell",
        "know",
    }
)

_K1 = 1.2
_B = 0.75


def stem(token: str) -> str:
    """Strip common English inflections (plural, -ing, -ed, -ly) from one token."""
    if len(token) <= 3 or token.isdigit():
        return token
    for suffix, repl in (
        ("ies", "y"),
        ("sses", "ss"),
        ("ing", ""),
        ("edly", ""),
        ("ed", ""),
        ("ly", ""),
        ("es", ""),
        ("s", ""),
    ):
        if token.endswith(suffix) and len(token) - len(suffix) + len(repl) >= 3:
            if suffix == "s" and token.endswith("ss"):
                return token
            if suffix == "es" and not token.endswith(("ches", "shes", "xes", "zes", "oes")):
                return token[:-1]
            return token[: len(token) - len(suffix)] + repl
    return token


def tokenize(text: str) -> list[str]:
    """Return the stemmed, stop-word-free tokens of ``text`` (order preserved)."""
    return [stem(t) for t in _TOKEN_RE.findall(text.lower()) if t not in STOP_WORDS]


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into trimmed, non-empty sentences (on ``.!?`` and newlines)."""
    return [s.strip() for s in _SENTENCE_RE.split(text) if s and s.strip()]


def rank(query: str, texts: Sequence[str]) -> list[float]:
    """Score every text in ``texts`` against ``query``; returns one score in [0, 1] each.

    The corpus statistics (document frequency, average length) are computed over
    ``texts`` itself, so scores are relative to the candidate set.
    """
    q_terms = list(dict.fromkeys(tokenize(query)))
    if not q_terms or not texts:
        return [0.0 for _ in texts]
    docs = [Counter(tokenize(t)) for t in texts]
    n = len(docs)
    lengths = [sum(d.values()) for d in docs]
    avgdl = (sum(lengths) / n) or 1.0
    idf: dict[str, float] = {}
    for term in q_terms:
        df = sum(1 for d in docs if term in d)
        idf[term] = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
    total_idf = sum(idf.values()) or 1.0
    scores: list[float] = []
    for doc, length in zip(docs, lengths, strict=True):
        covered = 0.0
        raw = 0.0
        for term in q_terms:
            tf = doc.get(term, 0)
            if not tf:
                continue
            covered += idf[term]
            norm = tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * length / avgdl))
            raw += idf[term] * norm
        if covered == 0.0:
            scores.append(0.0)
            continue
        coverage = covered / total_idf
        strength = raw / (raw + 0.5)
        # Focus: how much of the text is about the query (short, on-topic texts win ties).
        focus = len([t for t in q_terms if t in doc]) / max(len(doc), 1)
        score = coverage * (0.55 + 0.3 * strength + 0.15 * min(1.0, focus * 2))
        scores.append(round(min(1.0, max(0.0, score)), 6))
    return scores
