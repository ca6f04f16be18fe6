"""A full or read-only state disk during a dream loses no memory file (issue 33, item 5).

The dream service runs in this process against the loopback Messages API, its state dir on a
real tmpfs (a shim when this machine cannot mount one, :mod:`tests.disk_support`). The disk
is filled, or made read-only, just before each write the dream makes there, one run per
write, every write in turn (:mod:`tests.dream_steps` counts them); afterwards the memory dir
is byte for byte what it was before the dream or what the dream left when it completed,
never anything in between, and so it stays after the service's next start, the disk healed.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memd.llm.backends import Protocol
from memd.llm.client import LLM
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from tests.disk_support import Disk, faulty_disk
from tests.dream_steps import (
    STEPS,
    handler,
    lock_rolled_back,
    memory_of,
    note,
    prepare,
    restart,
    run_once,
    tree,
)

pytestmark = pytest.mark.anyio

PAGE = os.sysconf("SC_PAGE_SIZE")  # tmpfs keeps a file's last page whole


async def dream_with_fault(
    root: Path, api: LoopbackAPI, llm: LLM, fault: str, at: int, protocol: Protocol = "tools"
) -> tuple[dict[str, Any], dict[str, str], int]:
    """A dream over a fresh world at ``root`` whose state disk takes ``fault`` just before
    its ``at``-th write there (0: never); the run, the memory dir after it, the writes.
    ``protocol``: the model drives the tools, or is asked for one answer."""
    memory = memory_of(root)
    prepare(memory)
    with faulty_disk(root / "state", in_process=True) as disk:
        api.set_handler(handler(protocol=protocol))
        STEPS.arm([root / "state"], at=at, action=lambda: disk.fault(fault))
        try:
            run = await run_once(root, llm, protocol)
        finally:
            STEPS.disarm()
        after = tree(memory)
        disk.heal()
        again = await restart(root, llm)
        assert tree(memory) == after, (fault, at, STEPS.labels[at - 1 : at])
        assert again.get("run_id") == run["run_id"], (again, run)
    return run, after, STEPS.count


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("fault", "protocol"), [("ENOSPC", "tools"), ("EROFS", "tools"), ("ENOSPC", "whole")]
)
async def test_a_state_disk_that_fails_at_any_write_of_a_dream_loses_nothing(
    tmp_path: Path, api: LoopbackAPI, llm: LLM, fault: str, protocol: Protocol
) -> None:
    """One run per write the dream makes in its state dir, the disk failing just before it:
    the memory dir ends as before the dream (the lock rolled back) or as the completed dream
    left it, never in between, and the next start keeps it so; whether the model drove the
    tools or answered once (its changes go through the same journal)."""
    clean, completed, writes = await dream_with_fault(
        tmp_path / "clean", api, llm, fault, 0, protocol
    )
    assert clean["state"] == "completed", clean
    prepare(memory_of(tmp_path / "before"))
    before = tree(memory_of(tmp_path / "before"))
    assert completed != before and "merged_494.md" not in completed
    assert writes >= 12, STEPS.labels  # record, journal, snapshot, a record per change, end
    kept: list[int] = []
    for at in range(1, writes + 1):
        root = tmp_path / f"at{at}"
        run, after, _ = await dream_with_fault(root, api, llm, fault, at, protocol)
        where = f"{fault} before write {at} of {writes}: {STEPS.labels[at - 1]}"
        if after == completed:
            assert run["state"] == "completed", (where, run)
            assert not lock_rolled_back(memory_of(root)), where
            kept.append(at)
            continue
        assert after == before, (where, run, sorted(set(after.items()) ^ set(before.items())))
        assert run["state"] in ("failed", "not started"), (where, run)
        if run["state"] == "not started":  # its record refused: the state disk's, not the lock
            assert run["gate"] == "state" and run["lock_holder"] is None, (where, run)
        assert "No space left" in run["reason"] or "Read-only" in run["reason"], (where, run)
        assert lock_rolled_back(memory_of(root)), where
    # Kept only when the disk failed after the run's end was on disk: its record's last write.
    commit = max(i for i, label in enumerate(STEPS.labels, 1) if "/.run.json." in label)
    assert kept and kept == list(range(kept[0], writes + 1)) and kept[0] >= commit, kept


def journal_of(root: Path) -> Path | None:
    found = sorted((root / "state" / "dream").glob("*/*/journal.jsonl"))
    return found[-1] if found else None


def padded_to_a_page_end(
    root: Path, disk: Disk, state: dict[str, int]
) -> Callable[[Any], replies.Reply]:
    """The model of the reported case, on a state disk that fills at the worst moment: it
    merges ``merged_494.md`` into ``a.md``, writes small notes until the run's journal ends a
    few bytes short of a page (tmpfs keeps a file's last page, so a full disk still takes a
    few bytes of the next line), then the disk fills and it deletes ``merged_494.md``."""
    grown: list[tuple[int, int]] = []  # (name length, the journal's growth)
    state.update(size=0, turn=0)

    def pad(length: int) -> replies.Reply:
        name = "p" + "x" * (length - 1) + ".md"
        return replies.tool_use("Write", {"file_path": name, "content": note("pad", "pad")})

    def answer(body: Any) -> replies.Reply:
        state["turn"] += 1
        path = journal_of(root)
        size = path.stat().st_size if path else 0
        if state["turn"] == 1:
            return replies.tool_use(
                "Write", {"file_path": "a.md", "content": note("a", "alpha, the only copy")}
            )
        if grown or state["turn"] > 2:
            grown.append((grown[-1][0] + 10 if grown else 10, size - state["size"]))
        state["size"] = size
        if len(grown) < 2:
            return pad(grown[-1][0] + 10 if grown else 10)
        if state.get("done"):
            return replies.text("Merged merged_494.md into a.md.")
        (n1, g1), (n2, g2) = grown[0], grown[1]
        slope = (g2 - g1) // (n2 - n1)
        const = g1 - slope * n1
        left = PAGE - size % PAGE
        if 5 <= left <= 30:
            disk.fault("ENOSPC")
            state["done"], state["left"] = 1, left
            return replies.tool_use("Delete", {"file_path": "merged_494.md", "merged_into": "a.md"})
        for room in range(12, 25):
            distance = (left - room) % PAGE
            length, rest = divmod(distance - const, slope)
            if rest == 0 and 1 <= length <= 200:
                return pad(length)
        return pad(200)

    return answer


async def test_a_delete_whose_record_a_full_disk_cuts_short_is_not_made(
    tmp_path: Path, api: LoopbackAPI, llm: LLM
) -> None:
    """The reported loss: the state disk full, a dream deleted ``merged_494.md`` merged into
    another file, and its record of the delete was a part of a line (a full tmpfs takes what
    fits in a file's last page and says nothing): the delete went unrecorded, the undo could
    not put the file back, and it was gone for good. Now the part line is taken back, the
    delete is not made, the run fails saying why, and nothing changes at the next start."""
    memory = memory_of(tmp_path)
    prepare(memory)
    before = tree(memory)
    with faulty_disk(tmp_path / "state", in_process=True) as disk:
        if not disk.real:
            pytest.skip("needs a real tmpfs: a shim fails whole writes, never a part")
        padding: dict[str, int] = {}
        api.set_handler(padded_to_a_page_end(tmp_path, disk, padding))
        run = await run_once(tmp_path, llm)
        assert padding.get("done"), padding  # the delete came with the journal at a page end
        assert tree(memory) == before, run
        assert run["state"] == "failed" and "No space left" in run["reason"], run
        assert "refused the record of a change" in run["reason"], run
        assert lock_rolled_back(memory)
        journal = journal_of(tmp_path)
        assert journal is not None
        raw = journal.read_bytes()
        assert raw.endswith(b"\n") and all(json.loads(line) for line in raw.splitlines())
        disk.heal()
        await restart(tmp_path, llm)
    assert tree(memory) == before
    assert (memory / "merged_494.md").read_text() == note("merged_494", "the only copy of this")


async def test_a_file_someone_edits_during_the_run_keeps_their_edit_when_it_is_undone(
    tmp_path: Path, api: LoopbackAPI, llm: LLM
) -> None:
    """Someone edits ``c.md`` after the dream's snapshot, then the dream edits it too and
    fails: the undo gives back their version (what the file held just before the dream's
    change), not the snapshot's."""
    memory = memory_of(tmp_path)
    prepare(memory)
    theirs = note("c", "gamma, seen yesterday, and a line the user added")
    calls: list[int] = []

    def answer(body: Any) -> replies.Reply:
        calls.append(1)
        if len(calls) == 1:
            (memory / "c.md").write_text(theirs)  # after the snapshot, before the edit
            return replies.tool_use(
                "Edit",
                {"file_path": "c.md", "old_string": "yesterday", "new_string": "on 2026-11-21"},
            )
        return replies.api_error(400, "bad request")

    api.set_handler(answer)
    run = await run_once(tmp_path, llm)
    assert run["state"] == "failed", run
    assert (memory / "c.md").read_text() == theirs
    await restart(tmp_path, llm)
    assert (memory / "c.md").read_text() == theirs


async def test_a_run_whose_end_the_state_disk_refuses_is_undone(
    tmp_path: Path, api: LoopbackAPI, llm: LLM
) -> None:
    """The agent finishes, then the state disk fills before the run's end is written: the
    run is not kept half-recorded; its changes go back, the lock is rolled back, and the run
    says why."""
    memory = memory_of(tmp_path)
    prepare(memory)
    before = tree(memory)
    with faulty_disk(tmp_path / "state", in_process=True) as disk:
        api.set_handler(handler(on_second=lambda: disk.fault("ENOSPC")))
        run = await run_once(tmp_path, llm)
        assert run["state"] == "failed" and "No space left" in run["reason"], run
        assert tree(memory) == before and lock_rolled_back(memory)
        disk.heal()
        again = await restart(tmp_path, llm)
    assert tree(memory) == before and again["state"] in ("failed", "interrupted"), again
    assert os.listdir(memory / "..")  # the project folder is still there
