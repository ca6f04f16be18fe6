"""Offline recall benchmark: quality and latency of the lexical ranker (memd.memory.rank).

Quality: the fixed memories in bench/data/recall/memories (56 files, all four types) and the
32 queries in bench/data/recall/queries.yaml, each with the memories a good recall returns.
Figures: recall@5 (share of expected memories in the top 5), hit@5 (queries with at least
one expected memory in the top 5), MRR (1 / rank of the first expected memory), and
violations of the tool rule (``must_not`` memories returned).

Latency: the same memories padded with generated ones to 200 files (the scan cap):
- scan of the dir: reading 200 heads and parsing their frontmatter;
- rank, index held: a query against an index the caller keeps;
- recall, fresh scan: ``rank_headers`` on a new scan of unchanged files (the index cache hits);
- index rebuild: building the index when term caches are warm (one memory changed);
- first query: everything cold (term analysis of 200 files, index build, query).

Cached recall (issue 12): :func:`memd.memory.recall.recall` end to end (no model: the lexical
ranker), with the :class:`~memd.memory.scan.HeaderCache` the daemon keeps vs a fresh scan of
every head, at 200 and 2,000 unchanged memories (the newest 200 are candidates either way).
"cached" reuses the stat pass within a second (back-to-back recalls); "stat every call" is
what a recall per prompt (seconds apart) pays. Target: p50 ≤ 10 ms at 2,000.

Memory (issue 27): bytes per memory, as traced by ``tracemalloc``, of the ranker's index
(:class:`~memd.memory.rank_index.RankIndex`) and of the whole recall cache (headers and index).

Run: ``python3 bench/recall.py [COUNT ...]`` (whole-recall counts, default 200 2000). Not part
of the test pass/fail.
"""

from __future__ import annotations

import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from memd.memory.frontmatter import MEMORY_TYPES, Frontmatter, render_document
from memd.memory.rank import (
    LexicalIndex,
    cached_index,
    doc_from_header,
    rank,
    rank_headers,
    term_counts,
)
from memd.memory.scan import MemoryHeader, scan_memories
from memd.memory.terms import _word_terms, analyze, stem

DATA = Path(__file__).resolve().parent / "data" / "recall"
TARGET_FILES = 200
REPEATS = 20


@dataclass(frozen=True)
class Query:
    text: str
    expected: tuple[str, ...]
    must_not: tuple[str, ...]
    recent_tools: tuple[str, ...]


@dataclass(frozen=True)
class Quality:
    recall_at_5: float
    hit_at_5: float
    mrr: float
    violations: int
    mean_results: float
    precision: float
    misses: tuple[str, ...]


def load_queries(path: Path = DATA / "queries.yaml") -> list[Query]:
    raw: list[dict[str, Any]] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return [
        Query(
            item["query"],
            tuple(item["expected"]),
            tuple(item.get("must_not", ())),
            tuple(item.get("recent_tools", ())),
        )
        for item in raw
    ]


def evaluate(headers: Sequence[MemoryHeader], queries: Sequence[Query]) -> Quality:
    index = LexicalIndex.build(doc_from_header(h) for h in headers)
    recalls: list[float] = []
    reciprocal: list[float] = []
    hits = violations = returned = relevant = 0
    misses: list[str] = []
    for q in queries:
        got = [r.key for r in rank(index, q.text, recent_tools=q.recent_tools)]
        found = [k for k in q.expected if k in got]
        returned += len(got)
        relevant += len(found)
        recalls.append(len(found) / len(q.expected))
        hits += bool(found)
        first = next((i for i, k in enumerate(got, 1) if k in q.expected), None)
        reciprocal.append(1 / first if first else 0.0)
        violations += sum(1 for k in q.must_not if k in got)
        if len(found) < len(q.expected):
            misses.append(f"{q.text!r}: expected {list(q.expected)}, got {got}")
    n = len(queries)
    return Quality(
        recall_at_5=sum(recalls) / n,
        hit_at_5=hits / n,
        mrr=sum(reciprocal) / n,
        violations=violations,
        mean_results=returned / n,
        precision=relevant / max(1, returned),
        misses=tuple(misses),
    )


_WORD_TEXT = """adapter alert allowlist analytics archive audit backfill banner batch billing bucket
cache canary cart catalog certificate changelog cleanup cluster coupon cron csv currency
dashboard deadline digest discount dns email embargo export fixture footer fraud gateway
geo header healthcheck image importer inventory invoice kafka ledger locale lockfile
mailer manifest metrics middleware mobile newsletter notification oauth onboarding pager
pagination parser partner permission pipeline pricing profile promo proxy quota receipt
reconciliation referral refund region release replica report retry review rollout sandbox
schema scheduler sdk search session shipping sitemap snapshot sso storage subscription
tax template tenant throttle timeout token tracing upload vendor voucher warehouse webhook
wishlist worker"""
_WORDS = _WORD_TEXT.split()


def padding_memories(count: int, seed: int = 7) -> list[tuple[str, str]]:
    """Generated topic files (relative name, text) that look like real ones."""
    rng = random.Random(seed)
    files: list[tuple[str, str]] = []
    for i in range(count):
        kind = MEMORY_TYPES[i % len(MEMORY_TYPES)]
        topic = rng.sample(_WORDS, 3)
        name = f"{topic[0].title()} {topic[1]} notes"
        description = f"How the {topic[0]} {topic[1]} interacts with {topic[2]} ({i})"
        body = "\n".join(" ".join(rng.sample(_WORDS, 9)) for _ in range(6))
        text = render_document(Frontmatter(name, description, kind), body + "\n")
        files.append((f"{kind}_{topic[0]}_{topic[1]}_{i}.md", text))
    return files


def _percentile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _clear_caches() -> None:
    for cached in (analyze, _word_terms, stem, term_counts, cached_index):
        cached.cache_clear()


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return (time.perf_counter() - start) * 1000.0


def padded_memory_dir(tmp: Path, count: int = TARGET_FILES) -> Path:
    """``tmp/memory``: the hand-written memories padded with generated ones to ``count``."""
    memory = tmp / "memory"
    shutil.copytree(DATA / "memories", memory)
    have = len(list(memory.glob("*.md")))
    for relative, text in padding_memories(count - have):
        (memory / relative).write_text(text, encoding="utf-8")
    return memory


def bench_latency(queries: Sequence[Query]) -> dict[str, tuple[float, float]]:
    """(p50, p95) in ms of each step at 200 memories."""
    with tempfile.TemporaryDirectory() as tmp:
        memory = padded_memory_dir(Path(tmp))
        scans = [_timed(lambda: scan_memories(memory)) for _ in range(7)]
        headers = scan_memories(memory)
        rescans = [scan_memories(memory) for _ in range(REPEATS)]
    assert len(headers) == TARGET_FILES
    docs = [doc_from_header(h) for h in headers]
    index = LexicalIndex.build(docs)
    held = [
        _timed(lambda q=q: rank(index, q.text, recent_tools=q.recent_tools))  # type: ignore[misc]
        for _ in range(REPEATS)
        for q in queries
    ]
    steady = [
        _timed(lambda q=q, h=h: rank_headers(h, q.text, recent_tools=q.recent_tools))  # type: ignore[misc]
        for h in rescans
        for q in queries
    ]
    rebuild = [_timed(lambda: LexicalIndex.build(docs)) for _ in range(REPEATS)]
    first: list[float] = []
    for q in queries:
        _clear_caches()
        first.append(_timed(lambda q=q: rank_headers(headers, q.text)))  # type: ignore[misc]
    return {
        "scan of the dir": _p50_p95(scans),
        "rank, index held": _p50_p95(held),
        "recall, fresh scan": _p50_p95(steady),
        "index rebuild": _p50_p95(rebuild),
        "first query": _p50_p95(first),
    }


def _p50_p95(values: Sequence[float]) -> tuple[float, float]:
    return statistics.median(values), _percentile(values, 0.95)


def bench_cached_recall(queries: Sequence[Query], count: int) -> dict[str, tuple[float, float]]:
    """(p50, p95) in ms of a whole lexical recall at ``count`` memories, cached vs not."""
    import anyio

    from memd.clock import SystemClock
    from memd.config import Config
    from memd.llm.client import Disabled
    from memd.memory.rank_index import RecallCache
    from memd.memory.recall import recall

    cfg, clock, llm = Config(), SystemClock(), Disabled("bench: lexical")
    caches = {"cached": RecallCache(), "cached, stat every call": RecallCache(refresh_s=0.0)}
    with tempfile.TemporaryDirectory() as tmp:
        memory = padded_memory_dir(Path(tmp), count)

        async def timed(cache: RecallCache | None, query: Query) -> float:
            start = time.perf_counter()
            result = await recall(
                query.text, memory_dir=memory, llm=llm, cfg=cfg, clock=clock, cache=cache
            )
            assert result.method == "lexical"
            return (time.perf_counter() - start) * 1000.0

        async def run() -> dict[str, tuple[float, float]]:
            figures = {}
            for name, cache in caches.items():
                await timed(cache, queries[0])  # fill the cache
                figures[name] = _p50_p95([await timed(cache, q) for _ in range(3) for q in queries])
            figures["fresh scan"] = _p50_p95([await timed(None, q) for q in queries[:8]])
            return figures

        return anyio.run(run)


def bench_index_memory(count: int) -> tuple[float, float, float]:
    """Bytes per memory (traced allocations) at ``count`` memories: the ranker's index alone
    (the process-wide word caches of :mod:`memd.memory.terms` warm), the same with those caches
    cold (they are bounded: 65,536 words), and the whole recall cache (headers and index)."""
    import tracemalloc

    from memd.memory.rank_index import RankIndex, RecallCache

    def index_bytes(headers: Sequence[MemoryHeader]) -> int:
        tracemalloc.start()
        index = RankIndex()
        for header in headers:
            index.put(header)
        index.lexical()
        used = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return used

    with tempfile.TemporaryDirectory() as tmp:
        memory = padded_memory_dir(Path(tmp), count)
        headers = scan_memories(memory, max_files=None)
        _clear_caches()
        cold = index_bytes(headers)
        warm = index_bytes(headers)
        _clear_caches()
        tracemalloc.start()
        cache = RecallCache()
        cache.ranked(memory, "deploy", limit=200)
        cache_bytes = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
    return warm / count, cold / count, cache_bytes / count


def main() -> None:
    import sys

    counts = [int(a) for a in sys.argv[1:]] or [200, 2_000]
    queries = load_queries()
    headers = scan_memories(DATA / "memories")
    quality = evaluate(headers, queries)
    print(f"memories: {len(headers)}  queries: {len(queries)}")
    print(
        f"recall@5 {quality.recall_at_5:.3f}  hit@5 {quality.hit_at_5:.3f}  MRR {quality.mrr:.3f}"
    )
    print(f"results per query {quality.mean_results:.2f}  precision {quality.precision:.3f}")
    print(f"tool-rule violations: {quality.violations}")
    for miss in quality.misses:
        print("  miss:", miss)
    print(f"latency at {TARGET_FILES} memories, ms (p50 / p95):")
    for step, (p50, p95) in bench_latency(queries).items():
        print(f"  {step:20} {p50:8.3f} / {p95:8.3f}")
    for count in counts:
        print(f"whole recall (lexical) at {count} memories, ms (p50 / p95):")
        for step, (p50, p95) in bench_cached_recall(queries, count).items():
            print(f"  {step:20} {p50:8.3f} / {p95:8.3f}")
        warm, cold, cache = bench_index_memory(count)
        print(
            f"  bytes per memory: index {warm:.0f} (word caches cold: {cold:.0f}), "
            f"recall cache (headers + index) {cache:.0f}"
        )


if __name__ == "__main__":
    main()
