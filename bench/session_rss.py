"""RSS per resident session, measured from outside as issue 28 did: the real daemon's RSS
before and after it ingests copies of corpus transcripts with fresh ids, divided by their count.

    python3 bench/session_rss.py [--copies 5] [--build DIR]

Two mixes, each in its own daemon (``python -m memd.daemon.main``, no API key), one after the
other in the same run:

* every: each of the corpus' transcripts (all 65 files, sub-agents' included, written as main
  sessions) ``--copies`` times: issue 28's mix;
* main: the corpus' main transcripts round-robin, as many sessions: ``bench/scale.py``'s mix.

The sessions are written while the daemon runs (its watcher picks them up). Three RSS readings
per daemon: its features loaded and nothing to read (``empty``); after one small session
(``one``: the tokenizer loads on the first estimate, a fixed cost of every daemon with a
session); after the mix. Printed: ``raw`` = (after - empty) / sessions, the issue's figure,
which spreads the tokenizer over the sessions; ``marginal`` = (after - one) / sessions, what
each resident session costs. Target: marginal <= 100 KiB on the ``every`` mix.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "client")]

from bench import scale  # noqa: E402

TARGET_KIB = 100
SETTLE_S = 3.0


def write_copy(root: Path, n: int, source: Path) -> None:
    """``source`` as session number ``n``, with a fresh id, in one of 40 project folders."""
    sid = str(uuid.UUID(int=(0x5E55 << 96) + n))
    body = source.read_bytes().replace(source.stem.encode(), sid.encode())
    project = root / f"-home-u-proj{n % 40:02d}"
    project.mkdir(parents=True, exist_ok=True)
    (project / f"{sid}.jsonl").write_bytes(body)


def every_transcript(copies: int) -> list[Path]:
    return sorted(scale.CORPUS.rglob("*.jsonl")) * copies


def main_transcripts(count: int) -> list[Path]:
    paths = sorted(
        p
        for p in scale.CORPUS.rglob("*.jsonl")
        if "subagents" not in p.parts and not p.name.startswith("agent-")
    )
    return [paths[i % len(paths)] for i in range(count)]


def measure(mix: list[Path]) -> dict[str, float]:
    """RSS (MiB) of one daemon empty, after one small session, after ``mix``."""
    with scale.temp_home() as (home, runtime):
        root = home / ".claude" / "projects"
        root.mkdir(parents=True)
        with scale.run_daemon(home, runtime) as d:
            d.wait_hello()
            d.wait_ingested(0)  # status answers once the features are loaded
            time.sleep(SETTLE_S)
            fig = {"empty": scale.rss_mib(d.proc.pid)}
            write_copy(root, 0, scale.CORPUS / "spotter" / "short.jsonl")
            d.wait_ingested(1)
            time.sleep(SETTLE_S)
            fig["one"] = scale.rss_mib(d.proc.pid)
            for n, source in enumerate(mix, start=1):
                write_copy(root, n, source)
            status = d.wait_ingested(len(mix) + 1)
            time.sleep(SETTLE_S)
            fig["after"] = scale.rss_mib(d.proc.pid)
            fig["in_memory"] = float(status["ingest"]["in_memory"]) - 1
    fig["sessions"] = float(len(mix))
    fig["mb"] = sum(p.stat().st_size for p in mix) / 1e6
    return fig


def report(name: str, fig: dict[str, float]) -> float:
    n = fig["sessions"]
    raw = (fig["after"] - fig["empty"]) * 1024 / n
    marginal = (fig["after"] - fig["one"]) * 1024 / n
    print(
        f"{name:>5}: {n:.0f} sessions ({fig['in_memory']:.0f} resident, {fig['mb']:.0f} MB);"
        f" RSS empty {fig['empty']:.1f}, one {fig['one']:.1f}, after {fig['after']:.1f} MiB;"
        f" first session + tokenizer {fig['one'] - fig['empty']:.1f} MiB"
    )
    print(f"       per session: raw {raw:.0f} KiB, marginal {marginal:.0f} KiB")
    return marginal


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--copies", type=int, default=5, help="copies of every corpus transcript")
    ap.add_argument("--build", type=Path, default=scale.REPO, help="run the daemon from this tree")
    args = ap.parse_args()
    scale.BUILD[0] = args.build.resolve()
    load = os.getloadavg()[0]
    print(f"load {load:.2f}, build {scale.BUILD[0]}")
    every = every_transcript(args.copies)
    marginal = report("every", measure(every))
    report("main", measure(main_transcripts(len(every))))
    verdict = "meets" if marginal <= TARGET_KIB else "MISSES"
    print(f"every-transcript mix: {marginal:.0f} KiB a session ({verdict} <= {TARGET_KIB} KiB)")


if __name__ == "__main__":
    main()
