"""The ranker's index of one memory dir, kept up to date as its files change (issue 27).

Recall ranks every memory of a project, not only the newest 200 (the scan cap of R-M4 limits
what a model's manifest shows, not what the ranker may consider). :class:`RankIndex` holds,
for each topic file, what the ranker needs: its analysed terms per field and the few header
fields results are made of. :class:`RecallCache` (the header cache the daemon keeps) puts a
memory in when its head is read (a new or changed file) and drops it when the file is gone,
so a change costs the analysis of that one file; the BM25F weights, which depend on every
document's length, are recomputed from the kept terms on the first query after a change (no
file is read again).

Memory is a budget: a memory's body is not kept, only its terms as ids into the index's
vocabulary (4 bytes a term), and the cache keeps headers without their body head; both keep
a ``reference`` memory's body when it warns, which the tool rule reads
(:func:`memd.memory.rank.is_tool_usage_reference`). Postings are flat arrays.
``bench/recall.py`` measures the bytes per memory.

A :class:`RankIndex` is pure and in memory, not thread-safe by itself: :class:`RecallCache`
locks around it.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from memd.memory.rank import (
    DEFAULT_LIMIT,
    FIELDS,
    LexicalIndex,
    RankDoc,
    Ranked,
    analyze_fields,
    answer_coverage,
    doc_from_header,
    encode_fields,
    ranking,
)
from memd.memory.relevance import Cover
from memd.memory.scan import DEFAULT_HEAD_LINES, HeaderCache, MemoryHeader
from memd.memory.terms import mentions_warning

COMPACT_ABOVE = 4096  # terms: renumbered when over twice this and twice those in use


def tool_rule_reads_body(header: MemoryHeader) -> bool:
    """Whether :func:`memd.memory.rank.is_tool_usage_reference` needs this memory's body: a
    ``reference`` memory whose body warns (the only body the rule looks at)."""
    return header.type == "reference" and mentions_warning(header.body_head, strong_only=True)


@dataclass(frozen=True, slots=True)
class _Entry:
    doc: RankDoc  # body emptied unless the tool rule needs it
    encoded: array[int]  # its fields' term ids (memd.memory.rank.encode_fields)


class RankIndex:
    """Every memory of one dir as the ranker sees it; see the module docstring."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._vocab: dict[str, int] = {}  # term -> id, for every term put since a compaction
        self._terms: list[str] = []  # id -> term
        self._built: LexicalIndex | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, relative: object) -> bool:
        return relative in self._entries

    def put(self, header: MemoryHeader) -> None:
        """Add the memory behind ``header``, or replace what was known of it."""
        doc = doc_from_header(header)
        fields = analyze_fields(doc, cached=False)
        if not tool_rule_reads_body(header):
            doc = replace(doc, body="")
        encoded = encode_fields(fields, self._vocab, self._terms)
        self._entries[header.relative] = _Entry(doc, encoded)
        self._built = None

    def drop(self, relative: str) -> None:
        """Forget a memory whose file is gone (nothing happens for one never put)."""
        if self._entries.pop(relative, None) is not None:
            self._built = None

    def lexical(self) -> LexicalIndex:
        """The BM25F index of every memory put, rebuilt from the kept terms after a change."""
        if self._built is None:
            if len(self._terms) > 2 * COMPACT_ABOVE and len(self._terms) > 2 * self._live():
                self._compact()
            entries = sorted(self._entries.values(), key=lambda e: e.doc.key)
            self._built = LexicalIndex.from_encoded(
                [e.doc for e in entries], [e.encoded for e in entries], self._vocab
            )
        return self._built

    def ranking(
        self, query: str, *, exclude: Collection[str] = (), recent_tools: Sequence[str] = ()
    ) -> list[Ranked]:
        """:func:`memd.memory.rank.ranking` over every memory put."""
        return ranking(self.lexical(), query, exclude=exclude, recent_tools=recent_tools)

    def vocabulary(self) -> int:
        """How many terms the index numbers (those in use and any not yet compacted away)."""
        return len(self._terms)

    def _live(self) -> int:
        fields = len(FIELDS)
        return len({t for e in self._entries.values() for t in e.encoded[fields:]})

    def _compact(self) -> None:
        """Renumber the terms still in use (those of memories since changed or gone are
        dropped), so edits over a long run do not grow the vocabulary without bound."""
        old_terms, fields = self._terms, len(FIELDS)
        self._vocab, self._terms = {}, []
        for relative, entry in self._entries.items():
            decoded: list[list[str]] = []
            at = fields
            for length in entry.encoded[:fields]:
                decoded.append([old_terms[i] for i in entry.encoded[at : at + length]])
                at += length
            self._entries[relative] = _Entry(
                entry.doc, encode_fields(decoded, self._vocab, self._terms)
            )


class RecallCache(HeaderCache):
    """The header cache with a :class:`RankIndex` per memory dir, kept in step with it.

    :meth:`ranked` is what recall asks: every memory of the dir (newest first) and the
    ranking of those not yet surfaced, for one query. Thread-safe.
    """

    def __init__(self, max_dirs: int = 64, refresh_s: float = 1.0) -> None:
        super().__init__(max_dirs=max_dirs, refresh_s=refresh_s)
        self._indexes: dict[str, RankIndex] = {}

    def _changed(
        self,
        key: str,
        before: Mapping[str, tuple[tuple[int, int, int], MemoryHeader]],
        after: dict[str, tuple[tuple[int, int, int], MemoryHeader]],
    ) -> None:
        """Put what is new or changed in the dir's index, drop what is gone, and keep the
        headers without their body head (the index holds its terms) unless the tool rule
        reads it."""
        if not before and not after:
            self._indexes.pop(key, None)
            return
        index = self._indexes.setdefault(key, RankIndex())
        for relative, (identity, header) in after.items():
            old = before.get(relative)
            if old is None or old[1] is not header or relative not in index:
                index.put(header)
                if header.body_head and not tool_rule_reads_body(header):
                    after[relative] = (identity, replace(header, body_head=""))
        for relative in before.keys() - after.keys():
            index.drop(relative)

    def statistics(self) -> tuple[int, int]:
        """How many memory dirs are indexed, and how many memories in all."""
        with self._lock:
            return len(self._indexes), sum(len(i) for i in self._indexes.values())

    def ranked(
        self,
        memory_dir: Path,
        query: str,
        *,
        limit: int,
        exclude: Collection[str] = (),
        recent_tools: Sequence[str] = (),
        head_lines: int = DEFAULT_HEAD_LINES,
        answer: int = DEFAULT_LIMIT,
    ) -> tuple[list[MemoryHeader], list[tuple[MemoryHeader, float]], Cover]:
        """Every memory's header (newest first); the best ``limit`` for ``query`` with their
        scores among those whose relative path is not in ``exclude``; and how much of the
        query the best of a lexical answer of ``answer`` memories covers
        (:func:`memd.memory.rank.answer_coverage`)."""
        headers = self.scan(memory_dir, max_files=None, head_lines=head_lines)
        key = str(memory_dir)
        with self._lock:
            index = self._indexes.get(key)
            known = self._dirs.get(key) or {}
            if index is None:
                return headers, [], Cover()
            ranked = index.ranking(query, exclude=exclude, recent_tools=recent_tools)
            cover = answer_coverage(index.lexical(), query, ranked, answer)
            found = ((known.get(r.key), r.score) for r in ranked[:limit])
            hits = [(hit[1], score) for hit, score in found if hit is not None]
            return headers, hits, cover
