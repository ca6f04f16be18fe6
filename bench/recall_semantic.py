"""The semantic recall stage on the recall-quality benchmark (issue 27): memd with and without.

The same data, memories, questions and figures as ``bench/recall_quality.py`` (whose loading
and scoring this uses), for two methods over the same files:

* ``memd``: the offline recall with the default config (lexical only);
* ``memd+semantic``: the same with the semantic stage on (``memory.semantic.model`` is
  MODEL_DIR), every memory embedded before the first question, as the daemon's worker would
  have done by then;

and the random floor and the ceiling. It needs the ``semantic`` extra and a model2vec folder:
``memdctl fetch-model`` saves ``minishlab/potion-base-8M`` in
``~/.local/state/memd/models/minishlab--potion-base-8M``. BENCHMARKS.md's figures are for
all-MiniLM-L6-v2 distilled into a static model offline (it says how); no potion model was
measured (the machine could not download one).

Speed and memory (``--latency COUNT``): a whole cached recall (``bench/recall.py``'s memories
padded to COUNT in one dir, its 32 queries, each run with the stage off and on in turn, every
memory embedded first), p50 and p95 in ms, and the vectors' bytes per memory as traced by
``tracemalloc`` (the matrix, keys and file identities the stage keeps; the model not counted).

Run: ``python3 bench/recall_semantic.py PATH/locomo10.json MODEL_DIR [--split dev|held-out|
all|both|none] [--min-similarity X [X ...]] [--latency COUNT]``; several floors are compared
over the same memories, one method each (``memd+semantic@X``). ``--beam`` reads DATA as a
BEAM tier's folder instead (``chats/100K``, as ``bench/recall_beam.py`` builds its memories
and questions), and adds BM25 with stopwords, the baseline issue 36 names.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO)]

from bench import recall as rb  # noqa: E402
from bench import recall_beam  # noqa: E402
from bench import recall_quality as rq  # noqa: E402
from memd.clock import SystemClock  # noqa: E402
from memd.config import Config, SemanticConfig  # noqa: E402
from memd.memory.rank_index import RecallCache  # noqa: E402
from memd.memory.recall import recall  # noqa: E402
from memd.memory.semantic import SemanticStage  # noqa: E402


def semantic_ranker(memory_dir: Path, cfg: Config, state_dir: Path) -> rq.Ranker:
    """The offline recall with the semantic stage on, every memory embedded first."""
    cache = RecallCache()
    stage = SemanticStage(lambda: cfg.memory, state_dir)
    stage.embed(memory_dir, cache.scan(memory_dir, max_files=None))
    why = stage.statistics().get("off_reason")
    if why:
        raise SystemExit(f"recall_semantic: the semantic stage is off: {why}")
    return rq.memd_ranker(memory_dir, cfg, cache, stage)


def evaluate(
    conversations: Sequence[rq.Conversation],
    cfg: Config,
    semantic: Mapping[str, Config],
    *,
    bm25: bool = False,
) -> dict[str, dict[str, rq.Score]]:
    """method -> category name (and "all", "ceiling") -> score; ``semantic``: method name ->
    the config with the stage on (one per ``min_similarity`` tried); ``bm25``: BM25 with
    stopwords too."""
    table: dict[str, dict[str, rq.Score]] = defaultdict(lambda: defaultdict(rq.Score))
    with tempfile.TemporaryDirectory(prefix="memd-recall-semantic-") as tmp:
        for number, conv in enumerate(conversations):
            memory_dir = Path(tmp) / f"project{number}"
            rq.write_memories(memory_dir, conv.memories)
            methods = {"memd": rq.memd_ranker(memory_dir, cfg)}
            for name, on in semantic.items():
                methods[name] = semantic_ranker(memory_dir, on, Path(tmp))
            if bm25:
                methods["bm25+stop"] = rq.bm25_ranker(conv.memories, stopwords=True)
            rq._score_conversation(conv, methods, table)
    return table


def latency(model: Path, count: int) -> tuple[dict[str, tuple[float, float]], float]:
    """(p50, p95) in ms of a whole cached recall at ``count`` memories with the stage off and
    on, and the vectors' bytes per memory (see the module docstring)."""
    queries = rb.load_queries()
    off = Config()
    on = _with_stage(off, model, SemanticConfig.min_similarity)
    clock = SystemClock()
    with tempfile.TemporaryDirectory(prefix="memd-recall-semantic-") as tmp:
        memory = rb.padded_memory_dir(Path(tmp), count)
        cache = RecallCache()
        stage = SemanticStage(lambda: on.memory, Path(tmp))
        headers = cache.scan(memory, max_files=None)
        stage.embed(memory, ())  # the model loaded: only the vectors are traced
        tracemalloc.start()
        stage.embed(memory, headers)
        vector_bytes = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        if stage.statistics().get("embedded_memories") != len(headers):
            raise SystemExit(f"recall_semantic: the stage is off: {stage.statistics()}")

        async def timed(cfg: Config, semantic: SemanticStage | None, query: str) -> float:
            start = time.perf_counter()
            await recall(
                query,
                memory_dir=memory,
                llm=None,
                cfg=cfg,
                clock=clock,
                cache=cache,
                semantic=semantic,
            )
            return (time.perf_counter() - start) * 1000.0

        async def run() -> dict[str, tuple[float, float]]:
            times: dict[str, list[float]] = {"lexical": [], "lexical + semantic": []}
            await timed(on, stage, queries[0].text)  # fill the cache
            for _ in range(5):
                for query in queries:
                    times["lexical"].append(await timed(off, None, query.text))
                    times["lexical + semantic"].append(await timed(on, stage, query.text))
            return {name: _p50_p95(values) for name, values in times.items()}

        return anyio.run(run), vector_bytes / len(headers)


def _p50_p95(values: Sequence[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(values), ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


def report(table: dict[str, dict[str, rq.Score]], title: str) -> str:
    semantic = [m for m in table if m.startswith("memd+semantic")]
    bm25 = ("bm25+stop",) if "bm25+stop" in table else ()
    return rq.report(table, title, ("memd", *semantic, *bm25, "random", "ceiling"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("data", type=Path, help="a LoCoMo-format JSON file (locomo10.json)")
    parser.add_argument("--beam", action="store_true", help="DATA is a BEAM tier's folder")
    parser.add_argument("model", type=Path, help="a model2vec folder (memdctl fetch-model)")
    parser.add_argument(
        "--split", choices=("dev", "held-out", "all", "both", "none"), default="both"
    )
    parser.add_argument("--latency", type=int, default=0, metavar="COUNT")
    parser.add_argument(
        "--min-similarity",
        type=float,
        nargs="+",
        default=[SemanticConfig.min_similarity],
        help="one value, or several to compare (each a method of its own, same memories)",
    )
    args = parser.parse_args(argv)
    kind = "a BEAM tier's folder" if args.beam else "a LoCoMo-format file"
    try:
        conversations = (recall_beam.load if args.beam else rq.load)(args.data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"recall_semantic: {args.data} is not {kind}: {exc}", file=sys.stderr)
        return 2
    cfg = Config()
    semantic = {
        _method(floor, args.min_similarity): _with_stage(cfg, args.model, floor)
        for floor in args.min_similarity
    }
    splits = {"dev": conversations[0::2], "held-out": conversations[1::2], "all": conversations}
    chosen = {"both": ("dev", "held-out"), "none": ()}.get(args.split, (args.split,))
    for name in chosen:
        table = evaluate(splits[name], cfg, semantic, bm25=args.beam)
        print(report(table, f"{name} ({len(splits[name])} conversations)"))
        print()
    if args.latency > 0:
        figures, per_memory = latency(args.model, args.latency)
        print(f"whole cached recall at {args.latency} memories, ms (p50 / p95):")
        for name, (p50, p95) in figures.items():
            print(f"  {name:20} {p50:8.3f} / {p95:8.3f}")
        print(f"  vectors: {per_memory:.0f} bytes per memory")
    return 0


def _method(floor: float, floors: Sequence[float]) -> str:
    return "memd+semantic" if len(floors) == 1 else f"memd+semantic@{floor:g}"


def _with_stage(cfg: Config, model: Path, floor: float) -> Config:
    on = SemanticConfig(True, str(model.absolute()), floor)
    return dataclasses.replace(cfg, memory=dataclasses.replace(cfg.memory, semantic=on))


if __name__ == "__main__":
    sys.exit(main())
