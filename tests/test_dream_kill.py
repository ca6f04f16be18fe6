"""kill -9 at every write of a dream, in the state dir and the memory dir alike (issue 33,
item 5): each run is killed just before one of its writes, every write in turn
(:mod:`tests.dream_kill_driver`), then someone edits a memory the dream was changing, then
the dream service starts again. The memory dir is what it was before the dream or what the
completed dream left, as the run's record says, never anything in between; the edit made
after the kill is kept; no temp file is left; the lock is rolled back unless the run was kept.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memd.llm.backends import Protocol
from memd.llm.client import LLM
from tests.dream_kill_driver import OUT
from tests.dream_steps import lock_rolled_back, memory_of, note, prepare, restart, tree

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
THEIRS = note("c", "gamma, seen yesterday; edited by hand after the kill")


@pytest.fixture(scope="module")  # one driver (its warm-up) for both protocols
def driver() -> Iterator[subprocess.Popen[str]]:
    with subprocess.Popen(
        [sys.executable, "-m", "tests.dream_kill_driver"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            yield proc
        finally:
            assert proc.stdin is not None
            proc.stdin.close()  # the driver ends at the end of its input
            proc.wait(30)


def killed_at(
    driver: subprocess.Popen[str], root: Path, at: int, protocol: Protocol = "tools"
) -> int:
    """The exit code of a dream over a fresh world at ``root``, killed before write ``at``."""
    prepare(memory_of(root))
    assert driver.stdin is not None and driver.stdout is not None
    driver.stdin.write(f"{root} {at} {protocol}\n")
    driver.stdin.flush()
    return int(driver.stdout.readline())


def without_c(files: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in files.items() if k != "c.md"}


@pytest.mark.timeout(600)
@pytest.mark.deadline(300)
@pytest.mark.parametrize("protocol", ["tools", "whole"])
async def test_kill_9_at_any_write_of_a_dream_is_undone_at_the_next_start(
    tmp_path: Path, driver: subprocess.Popen[str], llm: LLM, protocol: Protocol
) -> None:
    """``protocol``: the model drives the tools, or answers once (the same journal)."""
    assert killed_at(driver, tmp_path / "clean", 0, protocol) == 0
    state, *writes = (tmp_path / "clean" / OUT).read_text().splitlines()
    assert state == "completed"
    completed = tree(memory_of(tmp_path / "clean"))
    prepare(memory_of(tmp_path / "before"))
    before = tree(memory_of(tmp_path / "before"))
    assert without_c(completed) != without_c(before)
    kept = []
    for at in range(1, len(writes) + 1):
        root = tmp_path / f"at{at}"
        assert killed_at(driver, root, at, protocol) == -9, (at, writes[at - 1])
        memory = memory_of(root)
        (memory / "c.md").write_text(THEIRS)  # someone's edit after the kill: theirs to keep
        run = await restart(root, llm)
        now = tree(memory)
        where = f"killed before write {at} of {len(writes)}: {writes[at - 1]}"
        assert (memory / "c.md").read_text() == THEIRS, where
        if run.get("state") == "completed":
            assert without_c(now) == without_c(completed), where
            kept.append(at)
        else:
            assert without_c(now) == without_c(before), (where, run)
            assert lock_rolled_back(memory), where
    # Kept only when the kill came after the run's end was on disk: its record's last write.
    commit = max(i for i, label in enumerate(writes, 1) if "/.run.json." in label)
    assert kept == list(range(commit + 1, len(writes) + 1)), kept
