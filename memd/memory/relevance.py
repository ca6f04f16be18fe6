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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from memd.memory import related
from memd.memory.terms import CALENDAR, entity_terms, query_words

if TYPE_CHECKING:
    from memd.memory.scan import MemoryHeader


class LexicalIndex(Protocol):
    """What coverage reads of :class:`memd.memory.rank.LexicalIndex` (a protocol, so this
    module, which rank imports, does not import rank back)."""

    @property
    def docs(self) -> Sequence[object]: ...
    @property
    def idfs(self) -> Sequence[float]: ...
    def slot(self, term: str) -> int | None: ...
    def doc_terms(self, number: int) -> set[int]: ...


MIN_COVER = 0.15  # the share of the query's weight the best memory must hold
MIN_WORDS = 3  # or this many of the query's words (each at least half held) ...
MIN_WORDS_COVER = 0.05  # ... and this share, when the query names no one the memories lack
UNSEEN = 2.0  # a word no memory holds weighs this times one that one memory holds
NAME = 4.0  # a name the query gives weighs this times its idf


@dataclass(frozen=True)
class QueryWeight:
    """A query's words as :func:`coverage` weighs them: per word, its weight and the slots of
    its terms that some memory holds with the weight each carries; ``total``: the sum of the
    words' weights."""

    words: tuple[tuple[float, tuple[tuple[int, float], ...]], ...]
    total: float
    stranger: bool = False  # the query gives a name that no memory holds


@dataclass(frozen=True)
class Cover:
    """How much of a query one memory holds: the share of its weight, and how many of its
    words (each at least half of the word's weight); ``stranger``: the query gives a name no
    memory holds."""

    share: float = 0.0
    words: int = 0
    stranger: bool = False

    @property
    def enough(self) -> bool:
        """Whether an answer whose best memory holds this may be given: :data:`MIN_COVER` of
        the query's weight; or :data:`MIN_WORDS` of its words and :data:`MIN_WORDS_COVER`,
        unless the query is about someone the memories never mention (a long question
        that meets its memory on three words is about it, however much of its wording the
        memories lack)."""
        if self.share >= MIN_COVER:
            return True
        return self.words >= MIN_WORDS and self.share >= MIN_WORDS_COVER and not self.stranger


def query_weight(index: LexicalIndex, query: str) -> QueryWeight:
    """How much each word of ``query`` weighs over ``index`` (see the module docstring)."""
    size = len(index.docs)
    unseen = UNSEEN * math.log(1 + (size - 0.5) / 1.5)  # UNSEEN x the idf of a df of 1
    names = entity_terms(query) - CALENDAR
    words: list[tuple[float, tuple[tuple[int, float], ...]]] = []
    stranger = False
    for terms in query_words(query):
        weight, held, plain = 0.0, [], []
        for term in terms:
            slot = index.slot(term)
            stranger = stranger or (slot is None and term in names)
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
    return QueryWeight(tuple(words), sum(w for w, _ in words), stranger)


def covered(index: LexicalIndex, weight: QueryWeight, number: int) -> Cover:
    """How much of the query memory ``number`` of ``index`` holds."""
    if weight.total <= 0:
        return Cover(stranger=weight.stranger)
    terms = index.doc_terms(number)
    got, met = 0.0, 0
    for most, held in weight.words:
        part = min(most, max((w for slot, w in held if slot in terms), default=0.0))
        got += part
        met += most > 0 and part >= most / 2
    return Cover(got / weight.total, met, weight.stranger)


def coverage(index: LexicalIndex, weight: QueryWeight, number: int) -> float:
    """The share (0 to 1) of the query's weight that memory ``number`` of ``index`` holds."""
    return covered(index, weight, number).share


def best_coverage(index: LexicalIndex, query: str, numbers: Iterable[int]) -> Cover:
    """The best :func:`covered` among memories ``numbers`` of ``index`` (one that is
    :attr:`Cover.enough` first, then the largest share); an empty one for none."""
    weight = query_weight(index, query)
    found = [covered(index, weight, n) for n in numbers]
    return max(found, key=lambda c: (c.enough, c.share), default=Cover(stranger=weight.stranger))


def abstained(cover: Cover) -> str:
    """Why nothing was recalled, for a recall's reason and the hook's log."""
    return (
        f"nothing relevant enough: the best memory holds {cover.share:.0%} of the prompt's "
        f"weight ({MIN_COVER:.0%} needed, or {MIN_WORDS_COVER:.0%} and {MIN_WORDS} of its words)"
    )


@dataclass(frozen=True)
class Answerable:
    """Which memories a lexical answer may give (issue 36): any, when the best of the lexical
    ranker's answer covers enough of the query (``cover``, :mod:`memd.memory.relevance`);
    otherwise only those the semantic stage, when on, found alike to the query (at least
    ``semantic.min_similarity``: its fused score is above the lexical share alone), and
    none without it."""

    cover: Cover
    lexical: Sequence[tuple[MemoryHeader, float]]
    fused: Sequence[tuple[MemoryHeader, float]] | None  # None: the semantic stage is off

    @property
    def any(self) -> bool:
        return self.cover.enough

    def alike(self) -> set[str]:
        """The memories the semantic stage lifted: their fused score is above their share of
        the best lexical score."""
        if self.fused is None:
            return set()
        best = max((score for _, score in self.lexical), default=0.0)
        share = {h.relative: score / best for h, score in self.lexical} if best > 0 else {}
        return {h.relative for h, s in self.fused if s > share.get(h.relative, 0.0) + 1e-9}
