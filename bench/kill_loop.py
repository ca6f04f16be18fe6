"""kill -9 the real daemon many times, with notes and memory extractions running against the
loopback Messages API (a separate process): at random points, inside atomic writes of state,
notes and memory files, and inside the ingest of a large transcript; then check what survived.

    python3 bench/kill_loop.py [--kills 100] [--seed 1]

The lives take the phases in turn (random, state, notes, memory, ingest: see
``tests/kill_loop_support.py``); the output counts, per phase, the kills shown to have landed
inside it (a temp file left behind by the write; the ingest worker busy with the big file).
After the last kill memd starts once more and must show: no temp file anywhere, every state
file parses (no ``.corrupt``), every transcript ingested to its end, every interrupted notes
and memory run redone, every notes and memory file a whole version. The same checks run
after every kill on the notes and memory files. ``tests/test_kill_loop.py`` runs 5 kills.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "client")]

from tests.kill_loop_support import run_kill_loop  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    root = Path(tempfile.mkdtemp(prefix="memd-kill"))
    report = run_kill_loop(root, args.kills, seed=args.seed)
    shutil.rmtree(root)  # kept when a check failed, for a look
    points = sorted(report.kill_points_s) or [0.0]
    print(f"kill -9 loop: {report.kills} kills in {report.seconds:.0f} s (load avg {load})")
    for phase, count in report.phases.items():
        print(f"  {phase:7} lives {count.lives:3}  landed inside {count.landed:3}")
    landed = ", ".join(f"{name} {n}" for name, n in report.landed_in.most_common())
    print(f"kills inside a write, by file: {landed or '-'}")
    print(f"write-phase kills that came just after the rename: {report.after_rename}")
    for why, n in report.missed.most_common():
        print(f"missed: {why} ({n})")
    if report.ingest_at_kill:
        share = sorted(report.ingest_at_kill)
        print(
            f"big transcript unread at an ingest kill: {share[0]:.0%}-{share[-1]:.0%}"
            f" (median {share[len(share) // 2]:.0%})"
        )
    print(f"random kill points after the first append: {points[0]:.2f}-{points[-1]:.2f} s")
    print(f"notes runs in flight at a kill (summed): {report.runs_in_flight_at_kill}")
    print(f"notes files checked whole after a kill: {report.notes_versions_seen}")
    versions = dict(report.memory_versions_seen)
    print(f"memory file checked whole after a kill (version: times): {versions}")
    print(
        f"temp files left by kills (removed at the next start): {report.temp_files_before_restart}"
    )
    print(f"notes runs completed over all lives: {report.notes_lines_final}")
    print(f"final start to hello: {report.final_start_s:.2f} s; all final checks passed")


if __name__ == "__main__":
    main()
