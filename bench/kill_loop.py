"""kill -9 the real daemon at random points, many times, with notes and memory extractions
running against the loopback Messages API (a separate process); then check what survived.

    python3 bench/kill_loop.py [--kills 100] [--seed 1]

After the last kill memd starts once more and must show: no temp file anywhere, every state
file parses (no ``.corrupt``), every transcript ingested to its end, every interrupted notes
run redone (no ``pending``), every notes file a whole version. The same checks run after every
kill on the notes and seeded memory files. ``tests/test_kill_loop.py`` runs 10 kills.
"""

from __future__ import annotations

import argparse
import os
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
    report = run_kill_loop(Path(tempfile.mkdtemp(prefix="memd-kill")), args.kills, seed=args.seed)
    points = sorted(report.kill_points_s)
    print(f"kill -9 loop: {report.kills} kills in {report.seconds:.0f} s (load avg {load})")
    print(f"kill points after the first append: {points[0]:.2f}-{points[-1]:.2f} s")
    print(f"notes runs in flight at a kill (summed): {report.runs_in_flight_at_kill}")
    print(f"notes files checked whole after a kill: {report.notes_versions_seen}")
    print(
        f"temp files left by kills (removed at the next start): {report.temp_files_before_restart}"
    )
    print(f"notes runs completed over all lives: {report.notes_lines_final}")
    print(f"final start to hello: {report.final_start_s:.2f} s; all final checks passed")


if __name__ == "__main__":
    main()
