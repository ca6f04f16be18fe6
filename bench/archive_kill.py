"""kill -9 at every step of the archive of an unused memory and of its restore (issue 36).

    python bench/archive_kill.py [--phase archive,restore]

Runs the real daemon over the world of ``tests/archive_kill.py`` (a memory unused for 40
days), counts the writes its archive makes (the record, the move, the index), then for each
write kills a daemon just before it, starts memd again and checks that the memory is whole in
exactly one place, archived once (or, for a restore, back once with its index line), with no
temp file left and the record settled. Prints one line per failure and the totals; exits 1 on
any failure. The test suite runs a sample of these trials (``tests/test_archive_kill.py``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.archive_kill import archive_steps, archive_trial, restore_steps, restore_trial

PHASES = {"archive": (archive_steps, archive_trial), "restore": (restore_steps, restore_trial)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", default=",".join(PHASES), help="archive, restore")
    args = parser.parse_args()
    failures = kills = 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="memd-archive-kill-") as scratch:
        root = Path(scratch)
        for phase in [p for p in args.phase.split(",") if p in PHASES]:
            count, trial = PHASES[phase]
            steps = count(root / f"{phase}-count")
            for at, label in enumerate(steps, 1):
                kills += 1
                try:
                    trial(root / f"{phase}-{at}", at)
                except AssertionError:
                    failures += 1
                    print(f"{phase}: killed before step {at} ({label}):")
                    traceback.print_exc(limit=2)
            print(f"{phase}: {len(steps)} steps, each killed once")
    took = time.monotonic() - started
    print(f"{kills} kills: {failures} failed, {took:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
