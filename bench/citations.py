"""Citation checks benchmark (issue 26): what checking memories against the code costs.

A git repository of 2,000 source files (one commit) and a memory dir of 2,000 memories, each
citing lines and a symbol of one file, written with their citations as ``remember`` does.

- recall, warm: :func:`memd.memory.recall.recall` end to end (no model: the lexical ranker,
  the daemon's header cache) with the checks of the chosen memories, against the same recall
  without checks; the checks' caches are warm (the files did not change). Target: ≤ 1.5x.
- cold, first recall: a new :class:`~memd.memory.verify.Verifier` (the work tree found, HEAD
  read, the chosen memories' files read and hashed). Target: p50 ≤ 50 ms.
- cold, every citation: a new verifier checking all 2,000 cited files (what the first
  ``memdctl memories --check`` does), the index read by memd itself
  (:mod:`memd.git_index`), in turns with the same check reading it through ``git ls-files
  --debug`` (the same-run baseline). Target: p50 ≤ 50 ms.

Run: ``python3 bench/citations.py`` (``--cold``: only the cold checks). Not part of the test
pass/fail.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import anyio

from memd import git_index
from memd.clock import SystemClock
from memd.config import Config
from memd.memory.citations import Citation, from_frontmatter, infer, to_frontmatter
from memd.memory.frontmatter import Frontmatter, parse_document, render_document
from memd.memory.rank_index import RecallCache
from memd.memory.recall import RecalledMemory, recall
from memd.memory.trust import CitationChecks
from memd.memory.verify import Verifier

FILES = 2_000
REPEATS = 30
COLD_REPEATS = 10
QUERY = "how does the retry backoff in module 1234 handle timeouts"


def make_repo(root: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root.parent), "GIT_CONFIG_NOSYSTEM": "1"}
    for i in range(FILES):
        folder = root / "src" / f"pkg{i % 40}"
        folder.mkdir(parents=True, exist_ok=True)
        body = "".join(f"# line {n} of module {i}\n" for n in range(30))
        (folder / f"mod{i}.py").write_text(body + f"def retry_{i}(n):\n    return n * {i}\n")
    for argv in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-qm", "start"],
    ):
        subprocess.run(argv, cwd=root, env=env, check=True)


def make_memories(repo: Path, memory: Path) -> None:
    memory.mkdir(parents=True)
    verifier = Verifier()
    where = verifier.repository(repo)
    for i in range(FILES):
        text = (
            f"Module {i} retries with `retry_{i}()` in src/pkg{i % 40}/mod{i}.py:31-32; "
            f"the backoff for timeouts is linear in module {i}."
        )
        cited = verifier.baseline(where, infer(text))
        meta = Frontmatter(
            f"retry {i}",
            f"retry backoff of module {i}",
            "project",
            (("citations", to_frontmatter(cited)),),
        )
        (memory / f"project_retry_{i}.md").write_text(render_document(meta, text + "\n"))


def p50_ms(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def interleaved(
    a: Callable[[], object], b: Callable[[], object], repeats: int = REPEATS
) -> tuple[float, float]:
    """p50 of ``a`` and of ``b`` run in turns (the machine's load falls on both alike)."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for run, into in ((a, times[0]), (b, times[1])):
            start = time.perf_counter()
            run()
            into.append((time.perf_counter() - start) * 1000)
    return statistics.median(times[0]), statistics.median(times[1])


def one_recall(
    memory: Path, cache: RecallCache, checks: Callable[..., tuple[RecalledMemory, ...]] | None
) -> int:
    async def go() -> int:
        result = await recall(
            QUERY,
            memory_dir=memory,
            llm=None,
            cfg=Config(),
            clock=SystemClock(),
            cache=cache,
            checks=checks,
        )
        return len(result.memories)

    return anyio.run(go)


def main(cold_only: bool) -> None:
    work = Path(tempfile.mkdtemp(prefix="memd-bench-cite-"))
    try:
        repo, memory = work / "repo", work / "memory"
        repo.mkdir()
        make_repo(repo)
        make_memories(repo, memory)
        cited = all_citations(memory)
        cold_checks(repo, cited)  # the page cache warm for both
        with_git, own = interleaved(
            lambda: cold_checks(repo, cited, index_by_git=True),
            lambda: cold_checks(repo, cited),
            COLD_REPEATS * 2,
        )
        print(f"first check of all {FILES} cited files, new verifier, p50:")
        print(f"  index through git ls-files --debug (baseline): {with_git:.1f} ms")
        print(f"  index read by memd (memd.git_index):          {own:.1f} ms (target <= 50 ms)")
        if cold_only:
            return
        cache = RecallCache()
        state = work / "state"
        state.mkdir()
        warm = CitationChecks(state, lambda: Config().memory)
        checked = partial(warm.recalled, str(repo), memory)
        one_recall(memory, cache, None)
        one_recall(memory, cache, checked)
        plain, with_checks = interleaved(
            lambda: one_recall(memory, cache, None),
            lambda: one_recall(memory, cache, checked),
        )

        def cold_recall() -> None:
            fresh = CitationChecks(state, lambda: Config().memory)
            one_recall(memory, cache, partial(fresh.recalled, str(repo), memory))

        cold = p50_ms(cold_recall, COLD_REPEATS)
        all_cold = p50_ms(lambda: cold_all(repo, memory), 3)
        print(f"memories: {FILES}, cited files: {FILES}")
        print(f"recall without checks, warm, p50: {plain:.2f} ms")
        print(
            f"recall with checks, warm, p50:    {with_checks:.2f} ms "
            f"({with_checks / plain:.2f}x; target <= 1.5x)"
        )
        print(f"first recall, new verifier, p50:  {cold:.2f} ms (target <= 50 ms)")
        print(
            f"memories --check of {FILES} memories (reads and parses each), p50: {all_cold:.1f} ms"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


def all_citations(memory: Path) -> list[Citation]:
    found: list[Citation] = []
    for path in sorted(memory.glob("*.md")):
        cited = from_frontmatter(parse_document(path.read_text()).meta.extra)
        found.extend(cited or ())
    assert len(found) == FILES, len(found)
    return found


def cold_checks(repo: Path, cited: list[Citation], *, index_by_git: bool = False) -> None:
    verifier = Verifier()
    with index_through_git(index_by_git):
        check = verifier.check(verifier.repository(repo), cited)
    assert not check.warnings, check.warnings[:3]


@contextmanager
def index_through_git(enabled: bool) -> Iterator[None]:
    """Inside, git's index is read through ``git ls-files --debug`` (as before issue 26's
    own reader), the baseline of the same run."""
    own = git_index.read_index
    if enabled:
        git_index.read_index = lambda git_dir, oid_size: None
    try:
        yield
    finally:
        git_index.read_index = own


def cold_all(repo: Path, memory: Path) -> None:
    from memd.memory.scan import scan_memories

    checks = CitationChecks(memory.parent / "state", lambda: Config().memory)
    headers = scan_memories(memory, max_files=FILES, head_lines=30)
    rows = checks.listing(str(repo), memory, headers)
    assert len(rows) == FILES, len(rows)


if __name__ == "__main__":
    os.environ.setdefault("LC_ALL", "C.UTF-8")
    main(cold_only="--cold" in sys.argv[1:])
