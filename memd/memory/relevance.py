"""Whether anything is relevant enough to recall: how much of a query its best memory covers
(issue 36).

The lexical ranker orders memories and its answer leaves out those far below the best
(:func:`memd.memory.rank.strong_count`); both are relative, so any memory that shares one word
with a prompt came back, and nearly every prompt got memories: a question about another
project's people, "add pagination to the list API" asked of memories about someone's
holidays. This module judges the best of the answer on an absolute scale: the share of the
query's weight it holds, each word of the query weighing its rarity among the project's
memories (its idf, as the ranker weighs it). When the best memory covers less than
:data:`MIN_COVER`, nothing is recalled.

* A word counts once, whatever terms it gives: ``useEffect`` weighs as much as its rarest
  term (``useeffect``, ``use``, ``effect``) and is covered as far as its rarest term a memory
  holds reaches; an abbreviation and its long form likewise.
* A word no memory holds weighs :data:`UNSEEN` times a word one memory holds: the query asks
  about something the memories do not know.
* A name the query gives (a capitalised word inside a sentence, not a month or a weekday)
  weighs :data:`NAME` times as much: a question about Joanna is not answered by a memory about
  someone else's road trip because both mention a road trip.
* A memory that holds a word related in meaning to one of the query's (the ranker's table,
  :mod:`memd.memory.related`) covers that word as far as the ranker weighs the related word
  (0.6 times their cosine squared): "What pet does Evan have?" is answered by "Evan has a dog".

The constants were chosen on half of the sets ``bench/recall_abstain.py`` builds (questions
asked in their own project, in another project, and generated coding prompts over memories of
conversations) and checked on the other half and on ``bench/recall.py``'s hand-written coding
memories (BENCHMARKS.md). Pure; a query costs one pass over its words and, per memory judged,
one over that memory's terms.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memd.memory import related
from memd.memory.terms import CALENDAR, entity_terms, query_words

if TYPE_CHECKING:
    from memd.memory.rank import LexicalIndex

MIN_COVER = 0.15  # the share of the query's weight the best memory must hold
UNSEEN = 2.0  # a word no memory holds weighs this times one that one memory holds
NAME = 4.0  # a name the query gives weighs this times its idf


@dataclass(frozen=True)
class QueryWeight:
    """A query's words as :func:`coverage` weighs them: per word, its weight and the slots of
    its terms that some memory holds with the weight each carries; ``total``: the sum of the
    words' weights."""

    words: tuple[tuple[float, tuple[tuple[int, float], ...]], ...]
    total: float


def query_weight(index: LexicalIndex, query: str) -> QueryWeight:
    """How much each word of ``query`` weighs over ``index`` (see the module docstring)."""
    size = len(index.docs)
    unseen = UNSEEN * math.log(1 + (size - 0.5) / 1.5)  # UNSEEN x the idf of a df of 1
    names = entity_terms(query) - CALENDAR
    words: list[tuple[float, tuple[tuple[int, float], ...]]] = []
    for terms in query_words(query):
        weight, held, plain = 0.0, [], []
        for term in terms:
            slot = index.slot(term)
            rarity = unseen if slot is None else float(index.idfs[slot])
            rarity *= NAME if term in names else 1.0
            weight = max(weight, rarity)
            if slot is not None:
                held.append((slot, rarity))
            if term not in names and not term.isdigit():
                plain.append(term)
        for term, alike in related.expand(plain, related.NEAREST).items():
            if (slot := index.slot(term)) is not None:
                held.append((slot, related.WEIGHT * alike * alike * weight))
        words.append((weight, tuple(held)))
    return QueryWeight(tuple(words), sum(w for w, _ in words))


def coverage(index: LexicalIndex, weight: QueryWeight, number: int) -> float:
    """The share (0 to 1) of the query's weight that memory ``number`` of ``index`` holds."""
    if weight.total <= 0:
        return 0.0
    terms = index.doc_terms(number)
    got = 0.0
    for most, held in weight.words:
        got += min(most, max((w for slot, w in held if slot in terms), default=0.0))
    return got / weight.total


def best_coverage(index: LexicalIndex, query: str, numbers: Iterable[int]) -> float:
    """The largest :func:`coverage` among memories ``numbers`` of ``index`` (0 for none)."""
    weight = query_weight(index, query)
    return max((coverage(index, weight, n) for n in numbers), default=0.0)


def relevant_enough(cover: float) -> bool:
    """Whether an answer whose best memory covers ``cover`` of the query may be given."""
    return cover >= MIN_COVER


def abstained(cover: float) -> str:
    """Why nothing was recalled, for a recall's reason and the hook's log."""
    return (
        f"nothing relevant enough: the best memory holds {cover:.0%} of the prompt's weight "
        f"({MIN_COVER:.0%} needed)"
    )
