"""The compaction ladder: level 1 when the notes serve, else a summary call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memd.compaction.message import Msg
from memd.compaction.strategy import NotesInput, compact, files_to_restore
from memd.config import CompactionConfig
from memd.errors import LLMDisabled
from tests.compaction_support import GOOD_REPLY, ScriptedLLM, words_estimate

CFG = CompactionConfig()
TEMPLATE = "# Current State\n_what now_\n"


def conversation(tmp: Path) -> list[Msg]:
    msgs = [Msg.of("user", "start", uuid="u0", tokens=10)]
    for i in range(20):
        path = str(tmp / f"f{i}.py")
        call: dict[str, Any] = {
            "type": "tool_use",
            "id": f"t{i}",
            "name": "Read",
            "input": {"file_path": path},
        }
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": "code"}
        msgs.append(Msg.of("assistant", [call], uuid=f"a{i}", tokens=2_000))
        msgs.append(
            Msg.of("user", [result, {"type": "text", "text": "ok"}], uuid=f"r{i}", tokens=1)
        )
    return msgs


def notes(text: str | None, uuid: str | None = "r9") -> NotesInput:
    return NotesInput(text, TEMPLATE, uuid, notes_path="/n/summary.md")


@pytest.mark.anyio
async def test_usable_notes_need_no_model(tmp_path: Path) -> None:
    msgs = conversation(tmp_path)
    outcome = await compact(
        msgs,
        notes=notes(TEMPLATE + "Reading files.\n"),
        llm=None,
        model="m",
        threshold=167_000,
        cfg=CFG,
        estimate=words_estimate,
    )
    assert outcome.level == 1 and outcome.spent.api_calls == 0
    assert outcome.skipped_level1 is None
    assert outcome.tokens_after < outcome.tokens_before


@pytest.mark.anyio
async def test_empty_notes_fall_through_to_a_summary(tmp_path: Path) -> None:
    llm = ScriptedLLM(GOOD_REPLY)
    outcome = await compact(
        conversation(tmp_path),
        notes=notes(TEMPLATE),
        llm=llm,
        model="m",
        threshold=167_000,
        cfg=CFG,
        estimate=words_estimate,
    )
    assert outcome.level == 2 and outcome.spent.api_calls == 1
    assert outcome.skipped_level1 is not None
    assert outcome.skipped_level1.reason == "empty_template"


@pytest.mark.anyio
async def test_without_a_model_a_fall_through_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(LLMDisabled, match="unknown-id"):
        await compact(
            conversation(tmp_path),
            notes=notes(TEMPLATE + "x\n", uuid="unknown-id"),
            llm=None,
            model="m",
            threshold=167_000,
            cfg=CFG,
            estimate=words_estimate,
        )


@pytest.mark.anyio
async def test_custom_instructions_skip_the_notes(tmp_path: Path) -> None:
    llm = ScriptedLLM(GOOD_REPLY)
    outcome = await compact(
        conversation(tmp_path),
        notes=notes(TEMPLATE + "Reading files.\n"),
        llm=llm,
        model="m",
        threshold=167_000,
        cfg=CFG,
        estimate=words_estimate,
        trigger="manual",
        custom_instructions="Keep the file list.",
    )
    assert outcome.level == 2
    assert llm.requests[0]["messages"][-1]["content"][-1]["text"].endswith("Keep the file list.")


@pytest.mark.anyio
async def test_files_read_before_but_not_shown_after_are_restored(tmp_path: Path) -> None:
    for i in range(20):
        (tmp_path / f"f{i}.py").write_text(f"print({i})\n")
    msgs = conversation(tmp_path)
    outcome = await compact(
        msgs,
        notes=notes(TEMPLATE + "Reading files.\n", uuid="r18"),
        llm=None,
        model="m",
        threshold=167_000,
        cfg=CFG,
        estimate=words_estimate,
    )
    assert outcome.level == 1
    restored = await files_to_restore(msgs, outcome, estimate=words_estimate, cfg=CFG)
    kept_reads = {
        b["input"]["file_path"]
        for m in outcome.messages
        for b in m.content
        if b.get("type") == "tool_use"
    }
    assert kept_reads  # some reads survived in the kept messages …
    assert not kept_reads & {f.path for f in restored}  # … and are not restored again
    assert len(restored) == 5
    assert restored[0].content.startswith("print(")
