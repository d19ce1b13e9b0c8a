"""Near-duplicate reuse, measured before it is trusted: shadow mode, serve mode, the offline gate.

Agents rarely repeat a query word for word ("user preferences", "the user's preferences"), and
each rewording is a miss. A semantic cache would serve the nearest cached query above a
similarity threshold, and be wrong on one-word changes of meaning ("last week" / "next week",
"likes" / "does not like", another person's name). In shadow mode nothing is served: on a
miss the real fetch runs and its answer is the caller's, and beside it the nearest live cached
query of the same partition (same tenant and every request parameter but the query text) that
passes the threshold and every veto is the *candidate*. When the fetch returns, the two answers are
compared: **agreed** when the same record ids come back in the same top 3 and the id sets'
Jaccard index is at least 0.9, else **disagreed**. The counts say what serving would have saved
and risked::

    import wm_middleware
    from wm_middleware.semantic import SemanticReuse, report

    memory = wm_middleware.instrument(semantic=SemanticReuse())   # or semantic="shadow"
    ...                                                            # the application runs
    print(report(memory.stats()))
    # of 120 misses, 31 had a candidate: 30 agreed, 1 disagreed (disagreement <= 15.2% at 95%) ...

Serve mode (``semantic="serve"``, ``SemanticReuse(serve=True)``) answers a miss with its
candidate's entry only while the verdicts of its configuration bound disagreement at or below
``max_error`` (299 agreeing verdicts at the default 1%), keeps verifying a ``verify_share`` of
those near hits, and stops at once when a disagreement lifts the bound above it
(``near_served``, ``near_verified``; docs/semantic.md).

Offline, :func:`would_reuse` says what the shadow mode would make of one pair of queries, and
``benchmarks/bench_semantic.py`` runs it over public paraphrase and trap sets (docs/semantic.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Final, NamedTuple

from ._core import check_seconds
from ._near.text import Words, lexical_form, words
from ._near.vetoes import VETOES, Veto

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._core.stats import CacheStats

__all__ = [
    "VETOES",
    "NearMatch",
    "NearReport",
    "SemanticReuse",
    "Veto",
    "lexical_form",
    "report",
    "upper_bound",
    "would_reuse",
]

Embed = Callable[[Sequence[str]], Sequence[Sequence[float]]]
Vector = str | tuple[float, ...]  # a lexical form, or a unit-length embedding


class SemanticReuse:
    """How near-duplicate queries are found, and whether they are served. Keyword-only.

    ``SemanticReuse()`` is the default: no embedder, so queries match only when their lexical
    forms are equal (:func:`lexical_form`: Unicode NFKC, case folded, punctuation stripped, word
    order kept, contractions spelled out, hesitations, greetings and thanks dropped).

    Args:
        embed: the application's embedding function: a list of texts in, one vector per text
            out (sync; it runs in a worker thread). Similarity is the cosine of two vectors.
        min_similarity: the least similarity of a candidate, in (0, 1]. Default 0.9.
        vetoes: the rules that refuse a candidate whatever its similarity (default
            :data:`VETOES`, all of them); ``()`` switches them off.
        timeout: seconds a miss waits for its query's embedding once its own fetch is done
            (the embedding starts with the fetch). Default 0.1; past it the miss is counted in
            ``near_errors`` and the embedding, when it comes, is kept for later misses.
        serve: ``False`` (the default): shadow mode, nothing is served. ``True``: a miss whose
            candidate passed every veto is answered with the candidate's entry (a near hit)
            while the verdicts of its configuration (form, vetoes, similarity band) bound
            disagreement at or below ``max_error`` (one-sided 95% Clopper-Pearson); until then
            it fetches and is compared as in shadow mode. With an embedder, a miss then waits
            for its vector (at most ``timeout``) before it fetches.
        max_error: the highest bound on disagreement a near hit is served under, in (0, 1).
            Default 0.01: 299 agreeing verdicts and none disagreeing open a band.
        verify_share: the share of near hits fetched anyway, beside the caller, and compared
            (the first, then one in every ``1 / verify_share``), in [0, 1]. Default 0.1.

    Two configurations are equal when every field is (``embed`` by identity).

    Raises:
        TypeError, ValueError: a bad argument, named.
    """

    __slots__ = (
        "embed",
        "max_error",
        "min_similarity",
        "serve",
        "timeout",
        "verify_share",
        "vetoes",
    )

    def __init__(
        self,
        *,
        embed: Embed | None = None,
        min_similarity: float = 0.9,
        vetoes: Sequence[Veto] = VETOES,
        timeout: float = 0.1,
        serve: bool = False,
        max_error: float = 0.01,
        verify_share: float = 0.1,
    ) -> None:
        if embed is not None and not callable(embed):
            raise TypeError(f"embed must be callable, not {type(embed).__name__}")
        if isinstance(min_similarity, bool) or not isinstance(min_similarity, (int, float)):
            raise TypeError(f"min_similarity must be a number, not {type(min_similarity).__name__}")
        if not 0 < min_similarity <= 1:
            raise ValueError(f"min_similarity must be in (0, 1], got {min_similarity!r}")
        if isinstance(vetoes, (str, bytes)) or not all(isinstance(v, Veto) for v in vetoes):
            raise TypeError("vetoes must be a sequence of Veto (see wm_middleware.semantic.VETOES)")
        if not isinstance(serve, bool):
            raise TypeError(f"serve must be a bool, not {type(serve).__name__}")
        _check_share("max_error", max_error, low_open=True, high_open=True)
        _check_share("verify_share", verify_share, low_open=False, high_open=False)
        self.serve = serve
        self.max_error = float(max_error)
        self.verify_share = float(verify_share)
        self.embed = embed
        self.min_similarity = float(min_similarity)
        self.vetoes = tuple(vetoes)
        self.timeout = check_seconds("timeout", timeout)

    def _values(self) -> tuple[Any, ...]:
        return (
            id(self.embed),
            self.min_similarity,
            self.vetoes,
            self.timeout,
            self.serve,
            self.max_error,
            self.verify_share,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SemanticReuse):
            return NotImplemented
        return self.embed is other.embed and self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        embed = "lexical" if self.embed is None else getattr(self.embed, "__qualname__", "embed")
        return (
            f"SemanticReuse(embed={embed}, min_similarity={self.min_similarity}, "
            f"vetoes={len(self.vetoes)}, timeout={self.timeout}, serve={self.serve}, "
            f"max_error={self.max_error}, verify_share={self.verify_share})"
        )

    # -- the pieces the shadow mode and would_reuse share --------------------------------------
    def vectors(self, texts: Sequence[str]) -> list[Vector]:
        """One vector per text: its lexical form, or its embedding scaled to unit length.

        Raises:
            ValueError: ``embed`` returned the wrong number of vectors, or a vector that is
                empty, not finite or zero.
        """
        if self.embed is None:
            return [lexical_form(text) for text in texts]
        got = list(self.embed(list(texts)))
        if len(got) != len(texts):
            raise ValueError(f"embed returned {len(got)} vector(s) for {len(texts)} text(s)")
        return [_unit(vector) for vector in got]

    @staticmethod
    def similarity(a: Vector, b: Vector) -> float:
        """1.0 or 0.0 for lexical forms (equal or not); the cosine of two embeddings."""
        if isinstance(a, str) or isinstance(b, str):
            return 1.0 if a == b else 0.0
        if len(a) != len(b):
            return 0.0
        return max(-1.0, min(1.0, math.fsum(x * y for x, y in zip(a, b, strict=True))))

    def refused_by(self, a: Words, b: Words) -> str | None:
        """The name of the first veto refusing the pair, or ``None``."""
        for veto in self.vetoes:
            if veto.refuses(a, b):
                return veto.name
        return None


def _check_share(name: str, value: object, *, low_open: bool, high_open: bool) -> None:
    """A share in [0, 1], its ends open as told; else the error names ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    low = value > 0 if low_open else value >= 0
    high = value < 1 if high_open else value <= 1
    if not (low and high):
        ends = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise ValueError(f"{name} must be in {ends}, got {value!r}")


def _unit(vector: Sequence[float]) -> tuple[float, ...]:
    values = tuple(float(x) for x in vector)
    norm = math.sqrt(math.fsum(x * x for x in values))
    if not values or not math.isfinite(norm) or norm == 0:
        raise ValueError("embed returned an empty, zero or non-finite vector")
    return tuple(x / norm for x in values)


class NearMatch(NamedTuple):
    """What :func:`would_reuse` makes of a pair: a candidate or not, its similarity, the veto."""

    candidate: bool
    similarity: float
    veto: str | None  # the rule that refused it, or None


def would_reuse(a: str, b: str, *, semantic: SemanticReuse | None = None) -> NearMatch:
    """Would the shadow mode take cached query ``a`` as a candidate for the miss of ``b``?

    A candidate has a similarity of at least ``semantic.min_similarity`` and no veto. ``veto`` is
    the first rule refusing a pair above the threshold (``None`` below it). Both queries are in
    one partition here: across partitions nothing is ever a candidate.

    Raises:
        TypeError: ``a`` or ``b`` is not a str, or ``semantic`` not a :class:`SemanticReuse`.
    """
    semantic = SemanticReuse() if semantic is None else semantic
    if not isinstance(semantic, SemanticReuse):
        raise TypeError(f"semantic must be a SemanticReuse, not {type(semantic).__name__}")
    for name, text in (("a", a), ("b", b)):
        if not isinstance(text, str):
            raise TypeError(f"{name} must be a str, not {type(text).__name__}")
    first, second = semantic.vectors([a, b])
    similarity = semantic.similarity(first, second)
    if similarity < semantic.min_similarity:
        return NearMatch(False, similarity, None)
    veto = semantic.refused_by(words(a), words(b))
    return NearMatch(veto is None, similarity, veto)


# -- the report -------------------------------------------------------------------------------
_CONFIDENCE: Final = 0.95


def _binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    if p <= 0:
        return 1.0
    if p >= 1:
        return 1.0 if k >= n else 0.0
    log_p, log_q = math.log(p), math.log1p(-p)
    total = 0.0
    for i in range(k + 1):
        log_choose = math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
        total += math.exp(log_choose + i * log_p + (n - i) * log_q)
    return min(1.0, total)


def upper_bound(failures: int, trials: int, confidence: float = _CONFIDENCE) -> float:
    """The one-sided Clopper-Pearson upper bound on a rate seen as ``failures`` of ``trials``.

    The ``p`` at which seeing at most ``failures`` has probability ``1 - confidence``, found by
    bisection on the binomial CDF: 0 of 300 gives 0.99%. ``1.0`` with no trials.

    Raises:
        ValueError: counts out of range, or ``confidence`` not in (0, 1).
    """
    if not 0 <= failures <= trials:
        raise ValueError(f"failures must be in 0..trials, got {failures} of {trials}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    if failures == trials:
        return 1.0
    alpha = 1 - confidence
    low, high = failures / trials, 1.0
    for _ in range(100):
        middle = (low + high) / 2
        if _binomial_cdf(failures, trials, middle) > alpha:
            low = middle
        else:
            high = middle
    return high


class NearReport(NamedTuple):
    """A shadow (or serve) run in numbers; ``str()`` is the line to act on."""

    misses: int
    candidates: int
    agreed: int
    disagreed: int
    vetoed: int
    errors: int
    bound: float  # 95% upper bound on the disagreement rate of candidates
    served: int = 0  # near hits served
    verified: int = 0  # of them, fetched anyway and compared (their verdicts are counted above)
    served_bound: float = 0.0  # the highest bound a near hit was served under

    def __str__(self) -> str:
        saved = f"{self.agreed / self.misses:.1%}" if self.misses else "0%"
        verified = f" and {self.verified} verified near hits" if self.verified else ""
        line = (
            f"of {self.misses} misses{verified}, {self.candidates} had a candidate: "
            f"{self.agreed} agreed, {self.disagreed} disagreed (disagreement <= {self.bound:.1%} "
            f"at 95%); serving them would have saved {saved} of misses ({self.agreed} fetches) "
            f"and risked {self.disagreed} wrong answers; {self.vetoed} vetoed, "
            f"{self.errors} embedding errors"
        )
        if not self.served:
            return line
        return (
            f"{line}; served {self.served} near hits under a disagreement bound of at most "
            f"{self.served_bound:.2%} at 95%, saving {self.served - self.verified} requests "
            f"({self.verified} verified by a fetch)"
        )


def report(stats: CacheStats) -> NearReport:
    """The shadow or serve run so far of the memory whose ``stats()`` is ``stats``.

    Serving near-duplicates is worth considering only where ``bound`` is at most 1%; with
    ``SemanticReuse(serve=True)`` the line also says how many near hits were served, the
    requests that saved, and the highest bound any of them was served under.
    """
    return NearReport(
        stats.misses,
        stats.near_candidates,
        stats.near_agreed,
        stats.near_disagreed,
        stats.near_vetoed,
        stats.near_errors,
        upper_bound(stats.near_disagreed, stats.near_candidates),
        stats.near_served,
        stats.near_verified,
        stats.near_served_bound,
    )
