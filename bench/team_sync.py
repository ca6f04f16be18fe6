"""Team sync and recall at scale: 10,000 team memories by 50 authors (issue 37).

    python bench/team_sync.py [--memories 10000] [--authors 50]

A bare remote on this machine holds ``--memories`` team memories, written by ``--authors``
people in one commit each (each memory's frontmatter names its author, as a sync stamps
it). Then, for a new home:

- **first sync**: every memory fetched, checked and written here; against the baseline of
  plain ``git fetch`` of the same ref into an empty repository (the network and object work
  alone), as a ratio;
- **second sync, nothing new**: the git processes and network round trips it costs
  (target: one), and its time (it reads once more the files the first sync wrote, to trust
  their identity from then on); the **third** is the steady state;
- **a teammate's change**: one memory changed and pushed by another home, then synced here;
- **a change here**: one memory edited here and pushed;
- **recall**: a whole lexical recall (the daemon's cache, no model) over the 10,000 team
  memories against the same files as personal memories (the cost of reading team/ as
  other people's notes: provenance, quarantine), p50 and p95 over the recall benchmark's
  queries.

Prints the figures; not part of the test pass/fail. BENCHMARKS.md records them.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.recall import load_queries, padding_memories
from tests.team_support import GIT_ENV, Home, git
from tests.test_team_hostile import push_tree


def seed_remote(url: str, memories: int, authors: int) -> None:
    """``memories`` team memories on the remote's ref, one commit per author."""
    files = padding_memories(memories, seed=37)
    per = max(1, len(files) // authors)
    for n in range(authors):
        who = f"Author {n:02d} <author{n:02d}@example.org>"
        chunk = files[n * per : (n + 1) * per] if n < authors - 1 else files[n * per :]
        tree = {}
        for relative, text in chunk:
            stamped = text.replace("\nmetadata:\n", f'\nmetadata:\n  author: "{who}"\n', 1)
            tree[relative.encode()] = (b"100644", stamped.encode())
        push_tree(url, tree, parent=n > 0)


def plain_fetch(url: str, scratch: Path) -> float:
    repo = scratch / "plain.git"
    git("init", "--quiet", "--bare", str(repo))
    started = time.perf_counter()
    subprocess.run(
        ["git", "--git-dir", str(repo), "fetch", "--quiet", url, "+refs/memd/team:refs/x"],
        env=GIT_ENV,
        check=True,
    )
    return time.perf_counter() - started


def timed_sync(home: Home) -> tuple[float, Any]:
    started = time.perf_counter()
    outcome = home.sync()
    took = time.perf_counter() - started
    assert outcome.ok, outcome.message
    return took, outcome


def bench_recall(memory_dir: Path, queries: list[Any]) -> tuple[float, float]:
    import anyio

    from memd.clock import SystemClock
    from memd.config import Config
    from memd.llm.client import Disabled
    from memd.memory.rank_index import RecallCache
    from memd.memory.recall import recall

    cfg, clock, llm, cache = Config(), SystemClock(), Disabled("bench"), RecallCache()

    async def run() -> list[float]:
        await recall(
            queries[0].text, memory_dir=memory_dir, llm=llm, cfg=cfg, clock=clock, cache=cache
        )
        times = []
        for _ in range(3):
            for q in queries:
                started = time.perf_counter()
                await recall(
                    q.text, memory_dir=memory_dir, llm=llm, cfg=cfg, clock=clock, cache=cache
                )
                times.append((time.perf_counter() - started) * 1000.0)
        return times

    times = sorted(anyio.run(run))
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--authors", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="memd-team-bench-") as tmp:
        root = Path(tmp)
        url = str(root / "remote.git")
        git("init", "--quiet", "--bare", url)
        started = time.perf_counter()
        seed_remote(url, args.memories, args.authors)
        print(
            f"seeded {args.memories} memories by {args.authors} authors "
            f"in {time.perf_counter() - started:.1f} s"
        )
        baseline = plain_fetch(url, root)
        me, other = Home(root / "me", "me", url), Home(root / "other", "other", url)
        first, outcome = timed_sync(me)
        print(
            f"first sync: {first:.2f} s, took {len(outcome.taken)} memories, "
            f"{outcome.git_calls} git calls ({outcome.network_calls} network); "
            f"plain git fetch {baseline:.2f} s, ratio {first / baseline:.1f}x"
        )
        second, outcome = timed_sync(me)
        print(
            f"second sync, nothing new: {second * 1000:.0f} ms, {outcome.git_calls} git "
            f"call(s), {outcome.network_calls} network round trip(s)"
        )
        steady, outcome = timed_sync(me)
        print(
            f"third sync, nothing new (steady): {steady * 1000:.0f} ms, {outcome.git_calls} "
            f"git call(s), {outcome.network_calls} network round trip(s)"
        )
        timed_sync(other)
        name = sorted(p.name for p in (me.team).glob("*.md"))[0]
        (other.team / name).write_text((other.team / name).read_text() + "edited\n")
        timed_sync(other)
        took, outcome = timed_sync(me)
        print(
            f"a teammate's change: {took * 1000:.0f} ms, took {outcome.taken}, "
            f"{outcome.git_calls} git calls ({outcome.network_calls} network)"
        )
        (me.team / name).write_text((me.team / name).read_text() + "mine\n")
        took, outcome = timed_sync(me)
        print(
            f"a change here: {took * 1000:.0f} ms, pushed {outcome.pushed}, "
            f"{outcome.git_calls} git calls ({outcome.network_calls} network)"
        )
        queries = load_queries()
        team_p50, team_p95 = bench_recall(me.memory_dir, queries)
        personal = root / "personal" / "memory"
        shutil.copytree(me.team, personal)
        own_p50, own_p95 = bench_recall(personal, queries)
        print(
            f"recall over {args.memories} team memories: p50 {team_p50:.1f} ms, "
            f"p95 {team_p95:.1f} ms; the same as personal memories: p50 {own_p50:.1f} ms, "
            f"p95 {own_p95:.1f} ms; ratio {team_p50 / own_p50:.2f}x"
        )


if __name__ == "__main__":
    main()
