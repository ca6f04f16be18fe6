"""A dream on a model asked for one answer (issue 34): memd gathers, the model answers a list
of operations once, memd checks them all and applies them through the run's journal. The
dream service runs in this process against the loopback OpenAI-compatible server through the
real openai SDK, as a local server's small model is asked; the scripted weak model
(:mod:`memd.testing.weak_dream`) answers."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from memd.dream.lock import FLOCK_NAME, LOCK_NAME
from memd.dream.service import DreamService
from memd.llm.client import Backend
from memd.testing import loopback_replies as replies
from memd.testing.loopback import LoopbackAPI
from memd.testing.weak_model import WeakModel
from tests.dream_support import make_service
from tests.test_dream_e2e import RELEASE, TESTS_A, TESTS_B

pytestmark = pytest.mark.anyio

PRIOR_NS = 1_700_000_000_987_654_321
INDEX = (
    "# Memories\n"
    "- [test command](feedback_tests.md) — Run tests with scripts/check\n"
    "- [testing](feedback_testing.md) — scripts/check runs ruff, mypy and pytest\n"
    "- [release](project_release.md) — Releases are cut from the release branch\n"
)
WHOLE_SECRET = "TRANSCRIPT-BODY-NEVER-SENT"


def memory_of(root: Path) -> Path:
    return root / "projects" / "proj" / "memory"


def prepare(root: Path, files: Mapping[str, str] | None = None) -> Path:
    memory = memory_of(root)
    memory.mkdir(parents=True)
    chosen = files or {
        "feedback_tests.md": TESTS_A,
        "feedback_testing.md": TESTS_B,
        "project_release.md": RELEASE,
        "MEMORY.md": INDEX,
    }
    for name, text in chosen.items():
        (memory / name).parent.mkdir(parents=True, exist_ok=True)
        (memory / name).write_text(text)
    lock = memory / LOCK_NAME
    lock.write_text("")
    os.utime(lock, ns=(PRIOR_NS, PRIOR_NS))
    lines = [
        {"type": "user", "message": {"content": f"filler {WHOLE_SECRET} {n}"}} for n in range(50)
    ]
    lines.append({"type": "user", "message": {"content": "the release branch moved to main"}})
    (memory.parent / "s1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return memory


def tree(memory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(memory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(memory.rglob("*"))
        if p.is_file() and p.name not in (LOCK_NAME, FLOCK_NAME)
    }


async def dream(service: DreamService, root: Path) -> dict[str, Any]:
    """One forced dream; its run as ``status`` shows it."""
    answer = await service.check(cwd=None, project="proj", force=True)
    assert answer["started"], answer
    running = service.find_dir(memory_of(root)).running
    if running is not None:
        with anyio.fail_after(60):
            await running.done.wait()
    last: dict[str, Any] = service.row(memory_of(root))["last_runs"][0]
    return last


async def dreams(root: Path, llm: Backend, count: int = 1) -> list[dict[str, Any]]:
    service = make_service(root, llm, protocol="whole")
    runs = []
    async with anyio.create_task_group() as tg:
        await tg.start(service.run)
        for _ in range(count):
            runs.append(await dream(service, root))
        tg.cancel_scope.cancel()
    malformed = dict(service._guard.statistics().malformed)
    for run in runs:
        run["malformed"] = malformed.get("dream", 0)
    return runs


def sent(api: LoopbackAPI) -> list[str]:
    """The dream requests' text, as the server received them."""
    return [
        json.dumps(r.body) for r in api.requests if "operations on the memory" in json.dumps(r.body)
    ]


async def test_a_weak_model_merges_duplicates_dates_a_note_and_fixes_the_index(
    local: Backend, api: LoopbackAPI, tmp_path: Path
) -> None:
    api.set_handler(WeakModel(fault_every=0))
    memory = prepare(tmp_path)
    (run,) = await dreams(tmp_path, local)
    assert run["state"] == "completed", run
    assert sorted(run["files"]) == [
        "MEMORY.md",
        "feedback_testing.md",
        "feedback_tests.md",
        "project_release.md",
    ]
    assert not (memory / "feedback_testing.md").exists()
    merged = (memory / "feedback_tests.md").read_text()
    assert merged.startswith(TESTS_A.rstrip("\n")) and "runs ruff, mypy and pytest" in merged
    assert "The release branch was cut on " in (memory / "project_release.md").read_text()
    index = (memory / "MEMORY.md").read_text()
    assert "(feedback_testing.md)" not in index and "(feedback_tests.md)" in index
    assert (memory / LOCK_NAME).stat().st_mtime_ns != PRIOR_NS  # consolidated
    (request,) = sent(api)
    assert "tools" not in api.requests[-1].body
    assert "the release branch moved to main" in request  # a narrow excerpt went
    assert WHOLE_SECRET not in request  # the transcript did not, whole or in part
    journal = next((tmp_path / "state" / "dream").glob("*/*/journal.jsonl")).read_text()
    deleted = [json.loads(line) for line in journal.splitlines() if '"unlink"' in line]
    assert [(d["path"], d["merged_into"]) for d in deleted] == [
        ("feedback_testing.md", "feedback_tests.md")
    ]


async def test_without_an_index_operation_the_deleted_notes_lines_are_dropped(
    local: Backend, api: LoopbackAPI, tmp_path: Path
) -> None:
    memory = prepare(tmp_path)
    merge = {"op": "merge", "files": ["feedback_tests.md", "feedback_testing.md"], "text": TESTS_A}
    api.push(replies.text(json.dumps({"operations": [merge]})))
    (run,) = await dreams(tmp_path, local)
    assert run["state"] == "completed", run
    assert (memory / "MEMORY.md").read_text() == INDEX.replace(
        "- [testing](feedback_testing.md) — scripts/check runs ruff, mypy and pytest\n", ""
    )


def many_notes(count: int) -> dict[str, str]:
    """``count`` notes of ~1 KB of words each (two alike: a merge to make), and their index."""
    words = [
        "cache",
        "invalidation",
        "stays",
        "hard",
        "because",
        "the",
        "deploy",
        "fleet",
        "restarts",
        "slowly",
    ]
    files = {}
    for n in range(count):
        body = " ".join(f"{words[(n + i) % len(words)]}{i}" for i in range(120))
        name = "test command" if n < 2 else f"topic {n}"
        text = f"---\nname: {name}\ndescription: d{n}\ntype: project\n---\n\n{body}\n"
        files[f"project_{n:02d}.md"] = text
    files["MEMORY.md"] = "".join(f"- [n]({name}) — d\n" for name in files)
    return files


@pytest.mark.parametrize("limit", [4_000, 1_500])
async def test_a_request_over_a_small_models_context_is_asked_once_more_with_less_shown(
    local: Backend, api: LoopbackAPI, tmp_path: Path, limit: int
) -> None:
    """A small local model's context (4k tokens) cannot take what memd gathers of 30 notes:
    asked once more with what it shows cut to fit, the dream runs; a context nothing fits
    (1.5k) fails the run, changing nothing, after that one more request, never a third."""
    api.set_handler(WeakModel(fault_every=0))
    api.context_limit = limit
    memory = prepare(tmp_path, many_notes(30))
    before = tree(memory)
    (run,) = await dreams(tmp_path, local)
    first, second = sent(api)
    assert len(api.requests) == 2 and len(second) < len(first) * 0.5
    if limit == 1_500:
        assert run["state"] == "failed" and "does not fit the model" in run["reason"], run
        assert tree(memory) == before
        return
    assert run["state"] == "completed", run
    assert not (memory / "project_01.md").exists()  # merged into project_00.md


async def test_a_weak_models_bad_answers_lose_nothing_and_are_counted(
    local: Backend, api: LoopbackAPI, tmp_path: Path
) -> None:
    """Cut short, not JSON, a path outside the memory dir, everything deleted: each run fails
    having changed nothing (the lock rolled back too), and each answer is counted."""
    model = WeakModel(fault_every=1)
    api.set_handler(model)
    memory = prepare(tmp_path)
    before = tree(memory)
    runs = await dreams(tmp_path, local, count=4)
    assert set(model.faults) == {
        "dream_cut_short",
        "dream_invalid_json",
        "dream_outside",
        "dream_wipe",
    }
    reasons = [run["reason"] for run in runs]
    assert [run["state"] for run in runs] == ["failed"] * 4, reasons
    assert "cut short" in reasons[0] and "not valid JSON" in reasons[1], reasons
    assert "'../../outside.md' is not one of the notes shown whole" in reasons[2], reasons
    assert "2 of 3 topic files deleted" in reasons[3], reasons
    assert "MEMORY.md is empty or missing" in reasons[3], reasons
    assert tree(memory) == before
    assert not (tmp_path / "projects" / "outside.md").exists()
    assert (memory / LOCK_NAME).stat().st_mtime_ns == PRIOR_NS
    assert runs[-1]["malformed"] == 4


async def test_a_note_someone_edits_before_the_answer_lands_keeps_their_edit(
    local: Backend, api: LoopbackAPI, tmp_path: Path
) -> None:
    """The model was shown a note, then someone edits it before the answer is applied: the
    run is undone, nothing it wrote stays, and their edit is kept."""
    memory = prepare(tmp_path)
    theirs = TESTS_B.replace("together.", "together, and the docs build.")
    model = WeakModel(fault_every=0)

    def answer(body: dict[str, Any]) -> replies.Reply | None:
        (memory / "feedback_testing.md").write_text(theirs)
        return model(body)

    api.set_handler(answer)
    before = tree(memory)
    (run,) = await dreams(tmp_path, local)
    assert run["state"] == "failed" and "changed while the dream ran" in run["reason"], run
    assert (memory / "feedback_testing.md").read_text() == theirs
    after = tree(memory)
    assert {k: v for k, v in after.items() if k != "feedback_testing.md"} == {
        k: v for k, v in before.items() if k != "feedback_testing.md"
    }
    assert run["malformed"] == 0  # not the model's fault: not counted as a bad answer
