"""kill -9 at every step of a team sync, before, after and during each (issue 37).

    python bench/team_kill.py [--when before,after,during]

Makes the world of ``tests/team_kill.py`` once (two homes, a bare remote, work on both
sides), then for each step of bob's sync and each moment kills the sync there, lets everyone
sync to the end and checks that nothing was lost or duplicated and that both homes and the
remote agree. Prints one line per failure and the totals; exits 1 on any failure. The test
suite runs a sample of these trials (``tests/test_team_kill.py``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.team_kill import WHEN, count_steps, make_world, trial


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--when", default=",".join(WHEN), help="before, after, during")
    args = parser.parse_args()
    moments = [w for w in args.when.split(",") if w in WHEN]
    with tempfile.TemporaryDirectory(prefix="memd-team-kill-") as scratch:
        root = Path(scratch)
        make_world(root / "template")
        steps = count_steps(root / "template", root)
        started = time.monotonic()
        failures = 0
        for step in range(1, steps + 1):
            for when in moments:
                problem = trial(root / "template", root, step, when)
                if problem is not None:
                    failures += 1
                    print(f"step {step} {when}: {problem}")
        trials = steps * len(moments)
        took = time.monotonic() - started
        print(
            f"{trials} kills over {steps} steps ({', '.join(moments)}): {failures} failed, "
            f"{took:.0f} s"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
