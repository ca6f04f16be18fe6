"""Recall quality on a public long-conversation benchmark with evidence labels (issue 27).

Retrieval only, no model: does the memory holding a question's evidence come back?

Data: a file in the LoCoMo format (``locomo10.json`` of snap-research/LoCoMo, CC BY-NC 4.0; not
shipped with memd, give its path), or the folder ``locomo10_v2/`` that the repository's
``data/locomo10.zip`` unpacks to (the same conversations, one file each). Each conversation is
one project: every observation (one fact, with the dialogue id it came from) becomes one memory
file in a memory dir of its own, dated at its session's date; each question's evidence ids say
which memories hold the answer. Category 5 (adversarial: the answer is not in the conversation)
is left out unless ``--with-adversarial``. A question whose evidence is in no memory counts as
a miss for every method (the "ceiling" row says how many can be found at all).

Methods, on the same memories and questions:

* ``memd``: :func:`memd.memory.recall.recall` itself with no model (the offline path, default
  config), over real files through the header cache: what a user gets;
* ``bm25``, ``bm25+stop``: Okapi BM25 (``rank_bm25``, the ``bench`` extra) over each memory's
  whole text, lower-cased words, without and with memd's stopwords;
* ``random``: the expected figures of a random order (exact, not sampled).

Figures per category and overall: R@1, R@3, R@5 (questions with an evidence memory among the
first k results) and MRR (1 / rank of the first evidence memory; 0 past rank 10 for BM25,
past the last result for memd). Conversations are split in two halves by position (even:
``dev``, odd: ``held-out``): tune on ``dev``, report both.

Run: ``python3 bench/recall_quality.py PATH/locomo10.json [--split dev|held-out|all]
[--cap N]``; ``--cap N`` ranks only the newest N memories of each project (the old scan cap).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from memd.clock import SystemClock
from memd.config import Config
from memd.memory.frontmatter import Frontmatter, render_document
from memd.memory.rank_index import RecallCache
from memd.memory.recall import recall
from memd.memory.terms import STOPWORDS

if TYPE_CHECKING:
    from memd.memory.semantic import SemanticStage

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
KS = (1, 3, 5)
_SLUG = re.compile(r"[a-z0-9]+")
_WORDS = re.compile(r"\w+")
_SESSION_DATE = "%I:%M %p on %d %B, %Y"

Ranker = Callable[[str], list[str]]  # a question -> memory keys, best first


@dataclass(frozen=True)
class Memory:
    key: str  # relative path of its file
    text: str  # the whole file
    mtime: float
    evidence: str  # the dialogue id it came from ("D1:3")


@dataclass(frozen=True)
class Question:
    text: str
    category: int | str  # LoCoMo's number (CATEGORIES), or another benchmark's name
    evidence: frozenset[str]


@dataclass(frozen=True)
class Conversation:
    sample: str
    memories: tuple[Memory, ...]
    questions: tuple[Question, ...]


@dataclass
class Score:
    """Sums over questions; :meth:`row` gives the means."""

    n: int = 0
    hits: dict[int, float] = field(default_factory=lambda: dict.fromkeys(KS, 0.0))
    rr: float = 0.0

    def add(self, hits: Mapping[int, float], rr: float) -> None:
        self.n += 1
        for k in KS:
            self.hits[k] += hits[k]
        self.rr += rr

    def row(self) -> tuple[float, ...]:
        n = max(1, self.n)
        return (*(self.hits[k] / n for k in KS), self.rr / n)


# ---------------------------------------------------------------------------------------------
# Loading


def load(path: Path, *, adversarial: bool = False) -> list[Conversation]:
    """Conversations of a LoCoMo-format file as memories and questions; or of a folder of
    one file per conversation (``locomo10_v2/`` of the repository's ``data/locomo10.zip``:
    each file's keys at its top level), in the order of their numbers."""
    if path.is_dir():
        files = sorted(path.glob("*.json"), key=lambda f: (len(f.stem), f.stem))
        raw = [_joined(f.stem, json.loads(f.read_text(encoding="utf-8"))) for f in files]
    else:
        raw = json.loads(path.read_text(encoding="utf-8"))
    return [_conversation(item, adversarial) for item in raw]


def _joined(number: str, item: Mapping[str, Any]) -> dict[str, Any]:
    """One conversation's file of ``locomo10_v2/`` in ``locomo10.json``'s shape."""
    observed = {k: v for k, v in item.items() if k.endswith("_observation")}
    return {
        "sample_id": f"conv-{number}",
        "conversation": {k: v for k, v in item.items() if k.startswith(("speaker_", "session_"))},
        "observation": observed,
        "qa": item["qa"],
    }


def _conversation(item: Mapping[str, Any], adversarial: bool) -> Conversation:
    dialogue = item["conversation"]
    memories: list[Memory] = []
    used: set[str] = set()
    for session, speakers in item["observation"].items():
        number = session.removesuffix("_observation")
        when = _session_time(dialogue.get(f"{number}_date_time", ""))
        for speaker, facts in speakers.items():
            for fact, evidence in facts:
                key = unique_key(fact, used)
                meta = Frontmatter(name=f"{speaker}, {when:%d %B %Y}", description=fact)
                text = render_document(meta, f"{fact}\n")
                stamp = when.timestamp() + len(memories)  # keeps the dialogue's order
                memories.append(Memory(key, text, stamp, str(evidence)))
    questions = [
        Question(q["question"], int(q["category"]), frozenset(map(str, q.get("evidence", ()))))
        for q in item["qa"]
        if adversarial or int(q["category"]) != 5
    ]
    return Conversation(str(item.get("sample_id", "")), tuple(memories), tuple(questions))


def _session_time(text: str) -> datetime:
    try:
        return datetime.strptime(text.strip(), _SESSION_DATE).replace(tzinfo=UTC)
    except ValueError:
        return datetime(2023, 1, 1, tzinfo=UTC)


def unique_key(fact: str, used: set[str]) -> str:
    """A file name from the fact's first words, as an extraction would name a topic."""
    words = [w for w in _SLUG.findall(fact.lower()) if w not in STOPWORDS][:5] or ["memory"]
    base = "_".join(words)
    key, n = f"{base}.md", 1
    while key in used:
        n += 1
        key = f"{base}_{n}.md"
    used.add(key)
    return key


# ---------------------------------------------------------------------------------------------
# Methods


def write_memories(memory_dir: Path, memories: Iterable[Memory]) -> None:
    memory_dir.mkdir(parents=True, exist_ok=True)
    for memory in memories:
        path = memory_dir / memory.key
        path.write_text(memory.text, encoding="utf-8")
        os.utime(path, (memory.mtime, memory.mtime))


def memd_ranker(
    memory_dir: Path,
    cfg: Config,
    cache: RecallCache | None = None,
    semantic: SemanticStage | None = None,
) -> Ranker:
    """The offline recall as the daemon runs it (header cache, default config, no model;
    ``semantic``: the semantic stage too, ``cache`` the header cache it was fed from)."""
    cache = cache if cache is not None else RecallCache()
    clock = SystemClock()

    def ranked(question: str) -> list[str]:
        async def run() -> list[str]:
            result = await recall(
                question,
                memory_dir=memory_dir,
                llm=None,
                cfg=cfg,
                clock=clock,
                cache=cache,
                semantic=semantic,
            )
            return [m.relative for m in result.memories]

        return anyio.run(run)

    return ranked


def bm25_ranker(memories: Sequence[Memory], *, stopwords: bool) -> Ranker:
    from rank_bm25 import BM25Okapi  # the bench extra

    def words(text: str) -> list[str]:
        tokens = _WORDS.findall(text.lower())
        return [t for t in tokens if t not in STOPWORDS] if stopwords else tokens

    model = BM25Okapi([words(m.text) for m in memories])
    keys = [m.key for m in memories]

    def ranked(question: str) -> list[str]:
        scores = model.get_scores(words(question))
        order = sorted(range(len(keys)), key=lambda i: (-scores[i], i))[:10]
        return [keys[i] for i in order]

    return ranked


def random_expectation(total: int, relevant: int) -> tuple[dict[int, float], float]:
    """Exact R@k and MRR of a uniformly random order of ``total`` with ``relevant`` hits."""
    if relevant <= 0 or total <= 0:
        return dict.fromkeys(KS, 0.0), 0.0
    misses = total - relevant
    hits = {k: 1.0 - _choose_ratio(misses, total, min(k, total)) for k in KS}
    rr = 0.0
    none_before = 1.0  # P(the first r-1 picks all miss)
    for r in range(1, misses + 2):
        rr += none_before * relevant / (total - r + 1) / r
        none_before *= (misses - r + 1) / (total - r + 1)
    return hits, rr


def _choose_ratio(misses: int, total: int, k: int) -> float:
    """C(misses, k) / C(total, k): the chance that k random picks all miss."""
    return math.prod((misses - i) / (total - i) for i in range(k)) if k <= misses else 0.0


# ---------------------------------------------------------------------------------------------
# Scoring


def judge(got: Sequence[str], evidence_keys: frozenset[str]) -> tuple[dict[int, float], float]:
    first = next((i for i, key in enumerate(got, 1) if key in evidence_keys), None)
    hits = {k: float(first is not None and first <= k) for k in KS}
    return hits, (1.0 / first if first else 0.0)


def evaluate(
    conversations: Sequence[Conversation], cfg: Config, *, bm25: bool = True, cap: int = 0
) -> dict[str, dict[str, Score]]:
    """method -> category name (and "all", "ceiling") -> score. With ``cap``, memd's dir
    holds only the newest ``cap`` memories (as the scan cap left them before issue 27)."""
    table: dict[str, dict[str, Score]] = defaultdict(lambda: defaultdict(Score))
    with tempfile.TemporaryDirectory(prefix="memd-recall-quality-") as tmp:
        for number, conv in enumerate(conversations):
            memory_dir = Path(tmp) / f"project{number}"
            newest = sorted(conv.memories, key=lambda m: -m.mtime)
            write_memories(memory_dir, newest[:cap] if cap > 0 else newest)
            methods: dict[str, Ranker] = {"memd": memd_ranker(memory_dir, cfg)}
            if bm25:
                methods["bm25"] = bm25_ranker(conv.memories, stopwords=False)
                methods["bm25+stop"] = bm25_ranker(conv.memories, stopwords=True)
            _score_conversation(conv, methods, table)
    return table


def _score_conversation(
    conv: Conversation, methods: Mapping[str, Ranker], table: dict[str, dict[str, Score]]
) -> None:
    keys_of: defaultdict[str, set[str]] = defaultdict(set)
    for memory in conv.memories:
        keys_of[memory.evidence].add(memory.key)
    for question in conv.questions:
        wanted = frozenset(k for e in question.evidence for k in keys_of.get(e, ()))
        category = (
            CATEGORIES.get(question.category, str(question.category))
            if isinstance(question.category, int)
            else question.category
        )
        found = float(bool(wanted))
        for name in (category, "all"):
            table["ceiling"][name].add(dict.fromkeys(KS, found), found)
            hits, rr = random_expectation(len(conv.memories), len(wanted))
            table["random"][name].add(hits, rr)
        for method, ranker in methods.items():
            hits, rr = judge(ranker(question.text), wanted) if wanted else judge((), wanted)
            table[method][category].add(hits, rr)
            table[method]["all"].add(hits, rr)


def report(
    table: Mapping[str, Mapping[str, Score]],
    title: str,
    methods: Sequence[str] = ("memd", "bm25", "bm25+stop", "random", "ceiling"),
) -> str:
    """``table`` as a Markdown table under ``title``: a row per method (those of ``methods``
    it has, in that order) and category."""
    known = [c for c in CATEGORIES.values() if c in table["ceiling"]]
    others = sorted(set(table["ceiling"]) - {*known, "all"})
    categories = [*known, *others, "all"]
    lines = [f"### {title}", "", "| method | category | n | R@1 | R@3 | R@5 | MRR |"]
    lines.append("|---|---|---|---|---|---|---|")
    for method in methods:
        if method not in table:
            continue
        for category in categories:
            score = table[method][category]
            cells = " | ".join(f"{v:.3f}" for v in score.row())
            lines.append(f"| {method} | {category} | {score.n} | {cells} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("data", type=Path, help="a LoCoMo-format JSON file (locomo10.json)")
    parser.add_argument("--split", choices=("dev", "held-out", "all", "both"), default="both")
    parser.add_argument("--cap", type=int, default=0, help="rank only the newest N (0: all)")
    parser.add_argument("--with-adversarial", action="store_true")
    parser.add_argument("--no-bm25", action="store_true", help="without the bench extra")
    args = parser.parse_args(argv)
    try:
        conversations = load(args.data, adversarial=args.with_adversarial)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"recall_quality: {args.data} is not a LoCoMo-format file: {exc}", file=sys.stderr)
        return 2
    if not args.no_bm25:
        try:
            import rank_bm25  # noqa: F401
        except ImportError:
            print(
                "recall_quality: BM25 needs rank_bm25: pip install 'memd[bench]' (or pass "
                "--no-bm25)",
                file=sys.stderr,
            )
            return 2
    cfg = Config()
    splits = {
        "dev": conversations[0::2],
        "held-out": conversations[1::2],
        "all": conversations,
    }
    chosen = ("dev", "held-out") if args.split == "both" else (args.split,)
    for name in chosen:
        table = evaluate(splits[name], cfg, bm25=not args.no_bm25, cap=args.cap)
        print(report(table, f"{name} ({len(splits[name])} conversations)"))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
