"""The ranker's index of one memory dir, kept up to date as its files change (issue 27).

Recall ranks every memory of a project, not only the newest 200 (the scan cap of R-M4 limits
what a model's manifest shows, not what the ranker may consider). :class:`RankIndex` holds,
for each topic file, what the ranker needs: its analysed terms per field and the few header
fields results are made of. :class:`~memd.memory.scan.HeaderCache` puts a memory in when its
head is read (a new or changed file) and drops it when the file is gone, so a change costs
the analysis of that one file; the BM25F weights, which depend on every document's length,
are recomputed from the kept terms on the first query after a change (no file is read again).

Memory is a budget: a memory's body is not kept (only its terms, interned, so a term shared
by many memories is stored once), except a warning in a ``reference`` memory's body, which
the tool rule needs (:func:`memd.memory.rank.is_tool_usage_reference`). Postings are flat
arrays. ``bench/recall.py`` measures the bytes per memory.

A :class:`RankIndex` is pure and in memory, not thread-safe by itself: :class:`RecallCache`
(the header cache the daemon keeps) locks around it.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from memd.memory.rank import LexicalIndex, RankDoc, Ranked, analyze_fields, doc_from_header, ranking
from memd.memory.scan import DEFAULT_HEAD_LINES, HeaderCache, MemoryHeader
from memd.memory.terms import mentions_warning


@dataclass(frozen=True, slots=True)
class _Entry:
    doc: RankDoc  # body emptied unless the tool rule needs it
    fields: tuple[tuple[str, ...], ...]


class RankIndex:
    """Every memory of one dir as the ranker sees it; see the module docstring."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._built: LexicalIndex | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, relative: object) -> bool:
        return relative in self._entries

    def put(self, header: MemoryHeader) -> None:
        """Add the memory behind ``header``, or replace what was known of it."""
        doc = doc_from_header(header)
        fields = tuple(
            tuple(sys.intern(t) for t in terms) for terms in analyze_fields(doc, cached=False)
        )
        keep_body = doc.type == "reference" and mentions_warning(doc.body, strong_only=True)
        slim = RankDoc(
            key=doc.key,
            name=doc.name,
            description=doc.description,
            body=doc.body if keep_body else "",
            type=doc.type,
            mtime_ms=doc.mtime_ms,
        )
        self._entries[header.relative] = _Entry(slim, fields)
        self._built = None

    def drop(self, relative: str) -> None:
        """Forget a memory whose file is gone (nothing happens for one never put)."""
        if self._entries.pop(relative, None) is not None:
            self._built = None

    def lexical(self) -> LexicalIndex:
        """The BM25F index of every memory put, rebuilt from the kept terms after a change."""
        if self._built is None:
            entries = sorted(self._entries.values(), key=lambda e: e.doc.key)
            self._built = LexicalIndex.from_analyzed(
                [e.doc for e in entries], [e.fields for e in entries]
            )
        return self._built

    def ranking(
        self, query: str, *, exclude: Collection[str] = (), recent_tools: Sequence[str] = ()
    ) -> list[Ranked]:
        """:func:`memd.memory.rank.ranking` over every memory put."""
        return ranking(self.lexical(), query, exclude=exclude, recent_tools=recent_tools)


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
        after: Mapping[str, tuple[tuple[int, int, int], MemoryHeader]],
    ) -> None:
        if not before and not after:
            self._indexes.pop(key, None)
            return
        index = self._indexes.setdefault(key, RankIndex())
        for relative, (_, header) in after.items():
            old = before.get(relative)
            if old is None or old[1] is not header or relative not in index:
                index.put(header)
        for relative in before.keys() - after.keys():
            index.drop(relative)

    def ranked(
        self,
        memory_dir: Path,
        query: str,
        *,
        limit: int,
        exclude: Collection[str] = (),
        recent_tools: Sequence[str] = (),
        head_lines: int = DEFAULT_HEAD_LINES,
    ) -> tuple[list[MemoryHeader], list[tuple[MemoryHeader, float]]]:
        """Every memory's header (newest first), and the best ``limit`` for ``query`` with
        their scores among those whose relative path is not in ``exclude``."""
        headers = self.scan(memory_dir, max_files=None, head_lines=head_lines)
        key = str(memory_dir)
        with self._lock:
            index = self._indexes.get(key)
            known = self._dirs.get(key) or {}
            if index is None:
                return headers, []
            ranked = index.ranking(query, exclude=exclude, recent_tools=recent_tools)
            found = ((known.get(r.key), r.score) for r in ranked[:limit])
            return headers, [(hit[1], score) for hit, score in found if hit is not None]
