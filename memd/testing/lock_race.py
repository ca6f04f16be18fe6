"""Race several real processes for one consolidation lock (tests and ``bench/dream_lock.py``).

``python -m memd.testing.lock_race --worker`` reads one memory dir per stdin line, tries
:func:`memd.dream.lock.acquire` on it and prints ``won`` or ``busy``. :func:`race` keeps
``procs`` workers alive for all rounds (a winner must stay alive, or the others rightly take
over a dead holder's lock) and releases them together each round.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from memd.dream import lock

SETUPS = ("none", "dead_pid", "stale", "garbage")


@dataclass(frozen=True)
class RaceResult:
    rounds: int
    procs: int
    winners: tuple[int, ...]  # winners per round
    seconds: float


def worker() -> int:
    for line in sys.stdin:
        directory = Path(line.strip())
        result = lock.acquire(directory, stale_s=3600.0)
        print("won" if isinstance(result, lock.Acquired) else "busy", flush=True)
    return 0


def _prepare(directory: Path, setup: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    path = lock.lock_path(directory)
    if setup == "none":
        path.unlink(missing_ok=True)
        return
    body = {"dead_pid": b"999999999", "stale": str(os.getpid()).encode(), "garbage": b"\xff\x00"}
    path.write_bytes(body[setup])
    if setup == "stale":
        old = time.time() - 7200
        os.utime(path, (old, old))


def race(base: Path, *, rounds: int, procs: int) -> RaceResult:
    """``rounds`` rounds of ``procs`` processes; each round a new lock dir and setup."""
    argv = [sys.executable, "-m", "memd.testing.lock_race", "--worker"]
    workers = [
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(procs)
    ]
    began = time.perf_counter()
    winners: list[int] = []
    try:
        for number in range(rounds):
            directory = base / f"round{number}" / "memory"
            _prepare(directory, SETUPS[number % len(SETUPS)])
            for proc in workers:
                assert proc.stdin is not None
                proc.stdin.write(f"{directory}\n")
            for proc in workers:
                assert proc.stdin is not None
                proc.stdin.flush()
            answers = [proc.stdout.readline().strip() for proc in workers if proc.stdout]
            winners.append(answers.count("won"))
    finally:
        for proc in workers:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()
    return RaceResult(rounds, procs, tuple(winners), time.perf_counter() - began)


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        sys.exit(worker())
    sys.exit("usage: python -m memd.testing.lock_race --worker")
