"""Choosing memories for a query: the offline lexical ranker (the model selector's prompt and
answer are :mod:`memd.memory.selector`).

Recall (R-M6) asks a fast model to pick up to five memories from the manifest. Without an API
key, or when that call fails or times out, :func:`rank` answers instead, so a recall never
errors. Both paths follow the same rules:

* memories already surfaced in the session are not offered again;
* for tools the agent is using right now, reference notes about *using* those tools are left
  out (the conversation already shows how), but warnings and gotchas about them are kept.

The ranker is BM25F over four fields (name, description, file path, body head) with field
weights and per-field length normalisation, the English Snowball stemmer, English stopwords,
a few common developer abbreviations, and identifier splitting (``camelCase``,
``snake_case``, ``path/to/file.py`` each also match their parts). A name the query gives (a
capitalised word that does not start a sentence) narrows the field: a memory without it keeps only
:data:`ENTITY_MISS` of its score, since a person's or project's name is in so many memories
that its idf alone counts for little. Terms related in meaning to the query's (a table
distilled offline from an embedding model, shipped with memd: :mod:`memd.memory.related`)
and terms that keep company with the query's in the memories (:func:`expansion`) are added
with smaller weights, and a lexical answer leaves out results far below the best
(:func:`strong_count`). It is pure and needs no model; term weights per document are
computed once when the index is built, so a query costs a dictionary walk.
Figures: ``bench/recall_quality.py`` (BENCHMARKS.md).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from memd.memory import related
from memd.memory.frontmatter import MemoryType
from memd.memory.relevance import Cover, best_coverage
from memd.memory.scan import MemoryHeader
from memd.memory.terms import (
    analyze,
    entity_terms,
    mentions_warning,
    split_identifier,
    terms_of,
)

K1 = 1.2
FIELD_WEIGHTS: Mapping[str, float] = {"name": 3.0, "description": 2.0, "path": 1.5, "body": 1.0}
FIELD_B: Mapping[str, float] = {"name": 0.3, "description": 0.5, "path": 0.3, "body": 0.75}
DEFAULT_LIMIT = 5
ENTITY_MISS = 0.5  # the score left to a memory without a name the query gives
MIN_SHARE = 0.35  # a lexical answer leaves out results under this share of the best score
EXPAND_TERMS = 3  # co-occurring terms added per query term (see expansion)
EXPAND_WEIGHT = 0.1  # their weight against the query's own terms (1.0)
EXPAND_MIN_COUNT = 2  # memories a term must share with the seed
EXPAND_LIFT = 6.0  # a term offered is at least this many times likelier beside the seed
EXPAND_MAX_DF = 32  # only a query term held by at most this many memories is expanded
RELATED_TERMS = related.NEAREST  # terms related in meaning added per query term
RELATED_WEIGHT = related.WEIGHT  # a related term weighs this times its cosine squared


@dataclass(frozen=True, slots=True)
class RankDoc:
    """One memory as the ranker sees it. ``key`` is what results name (the relative path)."""

    key: str
    name: str = ""
    description: str = ""
    body: str = ""
    type: MemoryType | None = None
    mtime_ms: int = 0


@dataclass(frozen=True)
class Ranked:
    key: str
    score: float
    doc: int = -1  # its number in the index ranked


def doc_from_header(header: MemoryHeader) -> RankDoc:
    return RankDoc(
        key=header.relative,
        name=header.name or "",
        description=header.description or "",
        body=header.body_head,
        type=header.type,
        mtime_ms=header.mtime_ms,
    )


FIELDS = tuple(FIELD_WEIGHTS)  # the order of a document's analysed fields


def analyze_fields(doc: RankDoc, *, cached: bool = True) -> tuple[tuple[str, ...], ...]:
    """The terms of each of the document's fields (in :data:`FIELDS` order), repeats kept.
    ``cached=False`` keeps the texts out of :func:`analyze`'s cache (an index that keeps the
    terms itself has no use for it)."""
    run = analyze if cached else analyze.__wrapped__
    return (
        run(doc.name),
        run(doc.description),
        run(doc.key.removesuffix(".md")),
        run(doc.body),
    )


@lru_cache(maxsize=4096)
def term_counts(text: str) -> Mapping[str, int]:
    """How often each term occurs in ``text`` (cached: memories rarely change)."""
    return Counter(analyze(text))


def encode_fields(
    fields: Sequence[Sequence[str]], vocab: dict[str, int], terms: list[str]
) -> array[int]:
    """A document's analysed fields as one array: the four field lengths, then the term ids
    of each field in turn. New terms get the next id (``vocab`` and ``terms`` grow)."""
    encoded = array("I", (len(f) for f in fields))
    for field in fields:
        for term in field:
            number = vocab.get(term)
            if number is None:
                number = vocab[term] = len(terms)
                terms.append(term)
            encoded.append(number)
    return encoded


@dataclass(frozen=True)
class LexicalIndex:
    """Precomputed BM25F weights; build once per set of memories, query many times.

    Postings are flat arrays shared by every term (8 bytes a posting; a term costs its entry
    in ``slots`` and 12 bytes more), so an index over thousands of memories stays small; see
    :mod:`memd.memory.rank_index` for the one the daemon keeps.
    """

    docs: tuple[RankDoc, ...]
    slots: Mapping[str, int]  # term -> slot (a slot past ``starts`` has no postings)
    starts: array[int]  # slot -> its first posting; the next slot's start ends it
    numbers: array[int]  # doc numbers, slot by slot
    weights: array[float]  # the term's weighted tf in that doc
    idfs: array[float]  # slot -> idf
    encoded: tuple[array[int], ...]  # doc number -> its fields' slots (encode_fields), shared

    @classmethod
    def build(cls, docs: Iterable[RankDoc]) -> LexicalIndex:
        doc_list = tuple(docs)
        vocab: dict[str, int] = {}
        terms: list[str] = []
        encoded = [encode_fields(analyze_fields(doc), vocab, terms) for doc in doc_list]
        return cls.from_encoded(doc_list, encoded, vocab)

    @classmethod
    def from_encoded(
        cls, docs: Sequence[RankDoc], encoded: Sequence[array[int]], vocab: Mapping[str, int]
    ) -> LexicalIndex:
        """The index of ``docs`` whose fields were encoded already (:func:`encode_fields`)."""
        fields = len(FIELDS)
        sums = [sum(e[f] for e in encoded) for f in range(fields)]
        avg = [max(1.0, total / max(1, len(encoded))) for total in sums]
        tfs = [_weighted_tf(e, avg) for e in encoded]
        size = len(vocab)
        df = array("I", [0]) * size
        for weights in tfs:
            for slot in weights:
                df[slot] += 1
        starts = array("I", [0]) * (size + 1)
        for slot in range(size):
            starts[slot + 1] = starts[slot] + df[slot]
        filled = array("I", starts)
        numbers = array("I", [0]) * starts[size]
        weights_out = array("f", [0.0]) * starts[size]
        for number, weights in enumerate(tfs):
            for slot, weight in weights.items():
                at = filled[slot]
                numbers[at], weights_out[at] = number, weight
                filled[slot] = at + 1
        total = len(docs)
        idfs = array("f", (math.log(1 + (total - n + 0.5) / (n + 0.5)) for n in df))
        return cls(tuple(docs), vocab, starts, numbers, weights_out, idfs, tuple(encoded))

    def slot(self, term: str) -> int | None:
        """The slot of ``term`` if some doc holds it."""
        slot = self.slots.get(term)
        if slot is None or self.df(slot) == 0:
            return None
        return slot

    def df(self, slot: int) -> int:
        """How many docs hold the term in ``slot``."""
        if slot + 1 >= len(self.starts):
            return 0
        return int(self.starts[slot + 1] - self.starts[slot])

    def postings(self, term: str) -> tuple[array[int], array[float], float] | None:
        """The docs holding ``term``, its weighted tf in each, and its idf; ``None`` if none."""
        slot = self.slot(term)
        return None if slot is None else self.postings_at(slot)

    def postings_at(self, slot: int) -> tuple[array[int], array[float], float]:
        """:meth:`postings` of a slot that some doc holds."""
        start, end = self.starts[slot], self.starts[slot + 1]
        return self.numbers[start:end], self.weights[start:end], self.idfs[slot]

    def doc_terms(self, number: int) -> set[int]:
        """The distinct slots of doc ``number``."""
        return set(self.encoded[number][len(FIELDS) :])


@lru_cache(maxsize=8)
def cached_index(docs: tuple[RankDoc, ...]) -> LexicalIndex:
    """:meth:`LexicalIndex.build`, remembered for the last few sets of memories.

    Recall scans the same memories again and again; an unchanged set (same paths, texts and
    mtimes) reuses its index, so a query costs a hash of the docs and a dictionary walk.
    """
    return LexicalIndex.build(docs)


def _weighted_tf(encoded: array[int], avg: Sequence[float]) -> dict[int, float]:
    """Term id -> the document's BM25F weighted tf (field weights, per-field length norm)."""
    weights: dict[int, float] = {}
    at = len(FIELDS)
    for field, name in enumerate(FIELDS):
        length = encoded[field]
        if not length:
            continue
        b = FIELD_B[name]
        scale = FIELD_WEIGHTS[name] / (1 - b + b * length / avg[field])
        for slot in encoded[at : at + length]:
            weights[slot] = weights.get(slot, 0.0) + scale
        at += length
    return weights


def ranking(
    index: LexicalIndex,
    query: str,
    *,
    exclude: Collection[str] = (),
    recent_tools: Sequence[str] = (),
) -> list[Ranked]:
    """Every memory sharing a term with ``query``, best first, none cut (see :func:`rank`).

    ``exclude`` holds keys already surfaced; ``recent_tools`` applies the tool rule above.
    Ties go to the newer memory, then to the key, so results are deterministic.
    """
    names = entity_terms(query)
    scores: defaultdict[int, float] = defaultdict(float)
    for slot, weight in query_slots(index, query, names).items():
        numbers, tfs, idf = index.postings_at(slot)
        for number, tf in zip(numbers, tfs, strict=True):
            scores[number] += weight * idf * tf / (K1 + tf)
    named = [found[0] for t in names if (found := index.postings(t)) is not None]
    if named:  # a memory that lacks a name the query gives counts for less
        having = set.intersection(*(set(numbers) for numbers in named))
        for number in scores:
            if number not in having:
                scores[number] *= ENTITY_MISS
    docs = index.docs
    order = [(-score, -docs[n].mtime_ms, docs[n].key, n) for n, score in scores.items()]
    order.sort()  # best first, then the newer, then by key: deterministic
    ranked = (Ranked(key, -negative, n) for negative, _, key, n in order if key not in exclude)
    if not recent_tools:
        return list(ranked)
    by_key = {docs[n].key: docs[n] for n in scores}
    return [r for r in ranked if not is_tool_usage_reference(by_key[r.key], recent_tools)]


def query_slots(index: LexicalIndex, query: str, names: Collection[str]) -> dict[int, float]:
    """The slots of the query's terms that some memory holds, with their weights; then those
    of the terms related in meaning to each that is not a name or a number (the shipped table,
    :func:`memd.memory.related.expand`), at :data:`RELATED_WEIGHT` times the square of how
    alike they are (0.15 for a neighbour at the table's floor, 0.5, 0.43 for "injur" beside
    "injuri", 0.85), so a near synonym counts for more than a loose associate; then those of
    :func:`expansion`."""
    weights: dict[int, float] = {}
    plain: list[str] = []  # the terms that are not names or numbers: those expanded
    seeds: list[int] = []  # their slots, for the co-occurrence expansion
    for term, weight in terms_of(query).items():
        slot = index.slot(term)
        expanded = term not in names and not term.isdigit()
        if expanded:
            plain.append(term)
        if slot is not None:
            weights[slot] = weight
            if expanded:
                seeds.append(slot)
    for term, alike in related.expand(plain, RELATED_TERMS).items():
        if (slot := index.slot(term)) is not None and slot not in weights:
            weights[slot] = RELATED_WEIGHT * alike * alike
    for slot in expansion(index, seeds, exclude=weights.keys()):
        weights[slot] = EXPAND_WEIGHT
    return weights


def expansion(index: LexicalIndex, seeds: Iterable[int], *, exclude: Collection[int]) -> list[int]:
    """Terms that keep company with the query's in the memories themselves (co-occurrence
    query expansion): for each seed term held by at most :data:`EXPAND_MAX_DF` memories, the
    :data:`EXPAND_TERMS` terms that most often share a memory with it, weighted by their own
    rarity (``P(u | t) * log(N / df(u))``; a term seen once, or with the seed only once, is
    not offered). A memory that says "twisted his knee" then gains a little for "injury" when
    other memories hold both; the weight is small, so it mostly orders ties. The cost is
    bounded: at most :data:`EXPAND_MAX_DF` memories' terms per seed."""
    total = len(index.docs)
    chosen: dict[int, None] = {}
    for seed in seeds:
        numbers = index.postings_at(seed)[0]
        if len(numbers) > EXPAND_MAX_DF:
            continue
        together: Counter[int] = Counter()
        for number in numbers:
            together.update(index.doc_terms(number))
        scored = [
            (count / len(numbers) * math.log(total / df), slot)
            for slot, count in together.items()
            if count >= EXPAND_MIN_COUNT
            and slot not in exclude
            and (df := index.df(slot)) > 1
            and count * total >= EXPAND_LIFT * df * len(numbers)
        ]
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        chosen.update((slot, None) for _, slot in scored[:EXPAND_TERMS])
    return list(chosen)


def rank(
    index: LexicalIndex,
    query: str,
    *,
    limit: int = DEFAULT_LIMIT,
    exclude: Collection[str] = (),
    recent_tools: Sequence[str] = (),
) -> list[Ranked]:
    """The best ``limit`` memories for ``query``, best first; only those sharing a term with
    it (see :func:`ranking`) and scoring at least :data:`MIN_SHARE` of the best
    (:func:`strong_count`), and none when the best of those covers too little of the query
    (:func:`answer_coverage`)."""
    ranked = ranking(index, query, exclude=exclude, recent_tools=recent_tools)[:limit]
    strong = ranked[: strong_count([r.score for r in ranked])]
    return strong if answer_coverage(index, query, strong, limit).enough else []


def answer_coverage(index: LexicalIndex, query: str, ranked: Sequence[Ranked], limit: int) -> Cover:
    """How much of ``query`` the best memory of a lexical answer from ``ranked`` (best first:
    the first ``limit``, less those under :func:`strong_count`'s cut) holds
    (:mod:`memd.memory.relevance`); 0 when the answer is empty."""
    best = ranked[:limit]
    strong = best[: strong_count([r.score for r in best])]
    return best_coverage(index, query, (r.doc for r in strong))


def strong_count(scores: Sequence[float]) -> int:
    """How many of ``scores`` (best first) a lexical answer keeps: those at least
    :data:`MIN_SHARE` of the best. Recall goes into every prompt, so a memory that shares
    only an incidental word with it costs tokens and attention. On the hand-written set
    (``bench/recall.py``) the cut raises precision from 0.225 to 0.346 at the same recall@5;
    on LoCoMo it costs 0.009 R@5, results tied with dozens of others that share only a name
    (BENCHMARKS.md)."""
    if not scores:
        return 0
    floor = scores[0] * MIN_SHARE
    return next((n for n, score in enumerate(scores) if score < floor), len(scores))


def rank_headers(
    headers: Sequence[MemoryHeader],
    query: str,
    *,
    limit: int = DEFAULT_LIMIT,
    already_surfaced: Collection[str] = (),
    recent_tools: Sequence[str] = (),
) -> list[MemoryHeader]:
    """Rank scanned headers directly, reusing the index while the memories are unchanged."""
    ranked, _ = ranked_headers(
        headers, query, already_surfaced=already_surfaced, recent_tools=recent_tools
    )
    return [header for header, _ in ranked[:limit]]


def ranked_headers(
    headers: Sequence[MemoryHeader],
    query: str,
    *,
    already_surfaced: Collection[str] = (),
    recent_tools: Sequence[str] = (),
    answer: int = DEFAULT_LIMIT,
) -> tuple[list[tuple[MemoryHeader, float]], Cover]:
    """:func:`ranking` of scanned headers (those not surfaced), with their scores; and the
    :func:`answer_coverage` of a lexical answer of ``answer`` memories."""
    index = cached_index(tuple(doc_from_header(h) for h in headers))
    surfaced = {h.relative for h in headers} - {
        h.relative for h in selection_candidates(headers, already_surfaced)
    }
    by_key = {h.relative: h for h in headers}
    ranked = ranking(index, query, exclude=surfaced, recent_tools=recent_tools)
    cover = answer_coverage(index, query, ranked, answer)
    return [(by_key[r.key], r.score) for r in ranked], cover


def selection_candidates(
    headers: Sequence[MemoryHeader], already_surfaced: Collection[str]
) -> list[MemoryHeader]:
    """Headers not yet surfaced; ``already_surfaced`` may hold relative or absolute paths."""
    if not already_surfaced:
        return list(headers)
    surfaced = set(already_surfaced)
    return [h for h in headers if h.relative not in surfaced and str(h.path) not in surfaced]


def is_tool_usage_reference(doc: RankDoc, recent_tools: Sequence[str]) -> bool:
    """A ``reference`` memory about a tool in ``recent_tools`` that is not a warning."""
    if doc.type != "reference" or not recent_tools:
        return False
    about = set(analyze(f"{doc.name} {doc.description} {doc.key}"))
    if not any(_tool_terms(tool) <= about for tool in recent_tools if _tool_terms(tool)):
        return False
    if mentions_warning(f"{doc.name} {doc.description}"):
        return False
    return not mentions_warning(doc.body, strong_only=True)


@lru_cache(maxsize=256)
def _tool_terms(tool: str) -> frozenset[str]:
    """``mcp__github__create_issue`` -> the terms of ``github create issue``."""
    words = " ".join(split_identifier(tool.removeprefix("mcp__")))
    return frozenset(analyze(words)) - {"mcp", "tool"}
