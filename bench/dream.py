"""Dream gate check cost at a turn end, and the consolidation lock under a race.

Gate check: a project folder with 10,000 transcripts; the real service's turn-end check
(``DreamService._check``) with the time gate closed (a fresh lock: one ``lstat``) and with
it open (the stat-only session scan; the session threshold is set out of reach so no dream
starts and the throttle at 0 so every check scans), next to a bare ``os.scandir`` + ``stat``
of the same folder in the same run.

Lock race: ``--rounds`` rounds of ``--procs`` real processes racing for one lock (fresh, a
dead PID, stale, a garbage body in turn); every round must have exactly one winner.

    python3 bench/dream.py [--transcripts 10000] [--runs 50] [--rounds 1000] [--procs 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

import anyio

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO)]

from memd.clock import SystemClock  # noqa: E402
from memd.config import Config, DreamConfig  # noqa: E402
from memd.dream.exclusion import DirExclusion  # noqa: E402
from memd.dream.lock import LOCK_NAME  # noqa: E402
from memd.dream.service import DreamService  # noqa: E402
from memd.llm.client import LLM  # noqa: E402
from memd.llm.guard import CostGuard  # noqa: E402
from memd.llm.ledger import LEDGER_FILE, Ledger  # noqa: E402
from memd.llm.models import models_of  # noqa: E402
from memd.memory.location import Location  # noqa: E402
from memd.testing.lock_race import race  # noqa: E402


def make_service(root: Path, cfg: Config) -> DreamService:
    """The real dream service; the model client is a stand-in no check gets far enough to
    call (the session threshold is out of reach)."""
    clock = SystemClock()
    ledger = Ledger(root / LEDGER_FILE, clock)
    projects = root / "projects"

    async def locate(cwd: str) -> Location:
        raise AssertionError("the benchmark never locates a cwd")

    guard = CostGuard(cfg.budget, ledger, clock)
    stand_in = cast(LLM, object())
    return DreamService(
        projects,
        root / "state",
        cfg,
        clock,
        ledger,
        guard,
        lambda: models_of(stand_in),
        locate,
        DirExclusion(),
    )


def build(root: Path, transcripts: int) -> Path:
    memory = root / "projects" / "proj" / "memory"
    memory.mkdir(parents=True)
    for n in range(transcripts):
        (memory.parent / f"{n:08d}-session.jsonl").write_bytes(b"{}\n")
    return memory


def bare_scan(folder: Path) -> int:
    count = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.endswith(".jsonl") and entry.stat(follow_symlinks=False).st_mtime > 0:
                count += 1
    return count


def timed(func: object, runs: int) -> float:
    """Median wall time in ms of ``runs`` calls."""
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        func()  # type: ignore[operator]
        samples.append((time.perf_counter() - began) * 1000)
    return statistics.median(samples)


def gate_figures(transcripts: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        memory = build(root, transcripts)
        cfg = dataclasses.replace(
            Config(), dream=DreamConfig(scan_throttle_minutes=0.0, min_sessions=10**9)
        )
        service = make_service(root, cfg)
        found = service.find_dir(memory)
        lock = memory / LOCK_NAME
        lock.write_text("")  # fresh: the time gate is closed
        closed = timed(lambda: anyio.run(_check, service, found), runs)
        loop_only = timed(lambda: anyio.run(_nothing), runs)
        old = time.time() - 3 * 86400
        os.utime(lock, (old, old))  # 3 days old: the scan runs
        opened_runs, bare_runs = [], []
        for _ in range(runs):  # interleaved, so both see the same cache and load
            opened_runs.append(timed(lambda: anyio.run(_check, service, found), 1))
            bare_runs.append(timed(lambda: bare_scan(memory.parent), 1))
        opened, bare = statistics.median(opened_runs), statistics.median(bare_runs)
        verdict = found.verdict
        print(f"gate check, {transcripts} transcripts, median of {runs}:")
        print(
            f"  time gate closed (one lstat)      {closed:8.3f} ms   (event loop start alone "
            f"{loop_only:.3f} ms)"
        )
        print(f"  time gate open (stat scan)        {opened:8.3f} ms   -> {verdict}")
        print(f"  bare os.scandir + stat, same dir  {bare:8.3f} ms")


async def _nothing() -> None:
    return None


async def _check(service: object, found: object) -> None:
    await service._check(found, force=False, trigger="x", auto=True)  # type: ignore[attr-defined]


def lock_figures(rounds: int, procs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        result = race(Path(tmp), rounds=rounds, procs=procs)
    exact = sum(1 for w in result.winners if w == 1)
    print(
        f"lock race: {result.rounds} rounds x {result.procs} processes: {exact} rounds with "
        f"exactly one winner, {result.rounds - exact} without; "
        f"{result.seconds / result.rounds * 1000:.2f} ms per round"
    )
    if exact != result.rounds:
        raise SystemExit(f"winners per round: {sorted(set(result.winners))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transcripts", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=1_000)
    parser.add_argument("--procs", type=int, default=4)
    args = parser.parse_args()
    gate_figures(args.transcripts, args.runs)
    lock_figures(args.rounds, args.procs)


if __name__ == "__main__":
    main()
