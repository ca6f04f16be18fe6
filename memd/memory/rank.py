"""Choosing memories for a query: the offline lexical ranker and the model selector's pure parts.

Recall (R-M6) asks a fast model to pick up to five memories from the manifest. Without an API
key, or when that call fails or times out, :func:`rank` answers instead, so a recall never
errors. Both paths follow the same rules:

* memories already surfaced in the session are not offered again;
* for tools the agent is using right now, reference notes about *using* those tools are left
  out (the conversation already shows how), but warnings and gotchas about them are kept.

The ranker is BM25F over four fields (name, description, file path, body head) with field
weights and per-field length normalisation, a light suffix stemmer, English stopwords, a few
common developer abbreviations, and identifier splitting (``camelCase``, ``snake_case``,
``path/to/file.py`` each also match their parts). It is pure and needs no model; term weights
per document are computed once when the index is built, so a query costs a dictionary walk.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from memd.memory.frontmatter import MemoryType
from memd.memory.scan import MemoryHeader, format_manifest
from memd.memory.terms import analyze, mentions_warning, split_identifier, terms_of
from memd.privacy import scrub_text

K1 = 1.2
FIELD_WEIGHTS: Mapping[str, float] = {"name": 3.0, "description": 2.0, "path": 1.5, "body": 1.0}
FIELD_B: Mapping[str, float] = {"name": 0.3, "description": 0.5, "path": 0.3, "body": 0.75}
DEFAULT_LIMIT = 5
MIN_RELATIVE_SCORE = 0.35  # results scoring below this share of the best are noise


@dataclass(frozen=True)
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


def doc_from_header(header: MemoryHeader) -> RankDoc:
    return RankDoc(
        key=header.relative,
        name=header.name or "",
        description=header.description or "",
        body=header.body_head,
        type=header.type,
        mtime_ms=header.mtime_ms,
    )


def _fields(doc: RankDoc) -> dict[str, Mapping[str, int]]:
    return {
        "name": term_counts(doc.name),
        "description": term_counts(doc.description),
        "path": term_counts(doc.key.removesuffix(".md")),
        "body": term_counts(doc.body),
    }


@lru_cache(maxsize=4096)
def term_counts(text: str) -> Mapping[str, int]:
    """How often each term occurs in ``text`` (cached: memories rarely change)."""
    return Counter(analyze(text))


@dataclass(frozen=True)
class LexicalIndex:
    """Precomputed BM25F weights; build once per set of memories, query many times."""

    docs: tuple[RankDoc, ...]
    postings: Mapping[str, tuple[tuple[int, float], ...]]  # term -> (doc number, weighted tf)
    idf: Mapping[str, float]

    @classmethod
    def build(cls, docs: Iterable[RankDoc]) -> LexicalIndex:
        doc_list = tuple(docs)
        analyzed = [_fields(doc) for doc in doc_list]
        lengths = [{f: sum(c.values()) for f, c in fields.items()} for fields in analyzed]
        avg = {
            f: max(1.0, sum(lens[f] for lens in lengths) / max(1, len(lengths)))
            for f in FIELD_WEIGHTS
        }
        postings: defaultdict[str, list[tuple[int, float]]] = defaultdict(list)
        for number, fields in enumerate(analyzed):
            for term, weight in _weighted_tf(fields, lengths[number], avg).items():
                postings[term].append((number, weight))
        total = len(doc_list)
        idf = {
            t: math.log(1 + (total - len(p) + 0.5) / (len(p) + 0.5)) for t, p in postings.items()
        }
        return cls(doc_list, {t: tuple(p) for t, p in postings.items()}, idf)


@lru_cache(maxsize=8)
def cached_index(docs: tuple[RankDoc, ...]) -> LexicalIndex:
    """:meth:`LexicalIndex.build`, remembered for the last few sets of memories.

    Recall scans the same memories again and again; an unchanged set (same paths, texts and
    mtimes) reuses its index, so a query costs a hash of the docs and a dictionary walk.
    """
    return LexicalIndex.build(docs)


def _weighted_tf(
    fields: Mapping[str, Mapping[str, int]],
    lengths: Mapping[str, int],
    avg: Mapping[str, float],
) -> dict[str, float]:
    weights: dict[str, float] = {}
    for field_name, counts in fields.items():
        if not counts:
            continue
        b = FIELD_B[field_name]
        scale = FIELD_WEIGHTS[field_name] / (1 - b + b * lengths[field_name] / avg[field_name])
        for term, count in counts.items():
            weights[term] = weights.get(term, 0.0) + count * scale
    return weights


def rank(
    index: LexicalIndex,
    query: str,
    *,
    limit: int = DEFAULT_LIMIT,
    exclude: Collection[str] = (),
    recent_tools: Sequence[str] = (),
) -> list[Ranked]:
    """The best ``limit`` memories for ``query``, best first; only those sharing a term with it.

    ``exclude`` holds keys already surfaced; ``recent_tools`` applies the tool rule above.
    Ties go to the newer memory, then to the key, so results are deterministic.
    """
    scores: defaultdict[int, float] = defaultdict(float)
    for term, weight in terms_of(query).items():
        idf = index.idf.get(term)
        if idf is None:
            continue
        for number, tf in index.postings[term]:
            scores[number] += weight * idf * tf / (K1 + tf)
    eligible = {
        n: score
        for n, score in scores.items()
        if index.docs[n].key not in exclude
        and not is_tool_usage_reference(index.docs[n], recent_tools)
    }
    if not eligible:
        return []
    floor = max(eligible.values()) * MIN_RELATIVE_SCORE
    ordered = sorted(
        (n for n, score in eligible.items() if score >= floor),
        key=lambda n: (-eligible[n], -index.docs[n].mtime_ms, index.docs[n].key),
    )
    return [Ranked(index.docs[n].key, eligible[n]) for n in ordered[:limit]]


def rank_headers(
    headers: Sequence[MemoryHeader],
    query: str,
    *,
    limit: int = DEFAULT_LIMIT,
    already_surfaced: Collection[str] = (),
    recent_tools: Sequence[str] = (),
) -> list[MemoryHeader]:
    """Rank scanned headers directly, reusing the index while the memories are unchanged."""
    index = cached_index(tuple(doc_from_header(h) for h in headers))
    surfaced = {h.relative for h in headers} - {
        h.relative for h in selection_candidates(headers, already_surfaced)
    }
    by_key = {h.relative: h for h in headers}
    ranked = rank(index, query, limit=limit, exclude=surfaced, recent_tools=recent_tools)
    return [by_key[r.key] for r in ranked]


def selection_candidates(
    headers: Sequence[MemoryHeader], already_surfaced: Collection[str]
) -> list[MemoryHeader]:
    """Headers not yet surfaced; ``already_surfaced`` may hold relative or absolute paths."""
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


# ---------------------------------------------------------------------------------------------
# The model selector: prompt and answer parsing (the call itself lives with the LLM client)

SELECTOR_SYSTEM = """\
You decide which saved memories would help a coding agent with the request in front of it.
You get the request and a catalogue of memory files, one per line: the memory's type, its \
file path, when it was last changed, and a one-line description.

Choose at most {limit} memories that are clearly useful for this request. Choosing none is \
a good answer when nothing fits; do not choose a memory only because it shares a word with \
the request.

If tools in active use are listed, skip reference notes that explain how to use those tools: \
the agent already has working examples of them in its context. Do choose memories that warn \
about those tools: known bugs, gotchas, things that must not be done with them.

Reply with only a JSON array of the chosen file paths, spelled exactly as in the catalogue, \
for example ["feedback_testing.md", "team/deploy.md"]. Reply [] when nothing fits."""


def selector_system(limit: int = DEFAULT_LIMIT) -> str:
    return SELECTOR_SYSTEM.format(limit=limit)


def build_selector_prompt(
    query: str, candidates: Sequence[MemoryHeader], recent_tools: Sequence[str] = ()
) -> str:
    """The user message for the selector: request, tools in use, and the manifest.

    ``candidates`` should already exclude surfaced memories (:func:`selection_candidates`).
    Private spans and secrets are scrubbed: this text goes to a model.
    """
    tools = ", ".join(dict.fromkeys(t.strip() for t in recent_tools if t.strip()))
    parts = [f"Request:\n{query.strip()}"]
    if tools:
        parts.append(f"Tools in active use: {tools}")
    parts.append("Memories:\n" + (format_manifest(candidates) or "(none)"))
    return scrub_text("\n\n".join(parts))


_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_MD_PATH = re.compile(r"[\w./~\-]+\.md\b")
_LIST_KEYS = ("memories", "selected_memories", "selected", "paths", "files")


def parse_selection(text: str, known: Collection[str], *, limit: int = DEFAULT_LIMIT) -> list[str]:
    """Known memory paths named by the model's answer, in its order, at most ``limit``.

    Accepts a JSON array (bare, in a code fence, inside prose, or under a key such as
    ``memories``); without JSON, any ``*.md`` paths in the prose. Unknown paths are dropped;
    ``./x.md``, ``memory/x.md`` and absolute paths ending in a known path are recognised.
    """
    named = _json_selection(text)
    if named is None:
        named = _MD_PATH.findall(text)
    chosen: list[str] = []
    for item in named:
        resolved = _resolve(item, known)
        if resolved is not None and resolved not in chosen:
            chosen.append(resolved)
            if len(chosen) >= limit:
                break
    return chosen


def _json_selection(text: str) -> list[str] | None:
    candidates = [*_FENCED.findall(text), text, *_BRACKETS.findall(text)]
    for candidate in candidates:
        try:
            value = json.loads(candidate.strip())
        except ValueError:
            continue
        if isinstance(value, dict):
            value = next((value[k] for k in _LIST_KEYS if isinstance(value.get(k), list)), None)
        if isinstance(value, list):
            return [str(v) for v in value if isinstance(v, str)]
    return None


def _resolve(item: str, known: Collection[str]) -> str | None:
    path = item.strip().strip("`'\"").replace("\\", "/")
    for prefix in ("./", "memory/"):
        path = path.removeprefix(prefix)
    if path in known:
        return path
    tails = [k for k in known if path.endswith("/" + k)]
    if tails:
        return max(tails, key=len)
    if "/" not in path:
        same_name = [k for k in known if k.rsplit("/", 1)[-1] == path]
        if len(same_name) == 1:
            return same_name[0]
    return None
