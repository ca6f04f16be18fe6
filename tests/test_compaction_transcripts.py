"""Acceptance: compaction cores on every real transcript of the shared corpus.

For each transcript and every cut point (each message as ``lastSummarizedMessageId``, and
none), level 1 yields API-valid output that keeps exactly what the 10K/5/40K rules and tool-pair
protection require; micro-compaction and the summary request stay valid too.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from memd.compaction.full import build_summary_request
from memd.compaction.message import Msg, to_api
from memd.compaction.microcompact import microcompact
from memd.compaction.session_memory import Compacted, FallThrough, compact_with_notes
from memd.config import CompactionConfig
from memd.tokens import estimate_content
from memd.transcript.conversation import Conversation
from tests.compaction_support import (
    api_problems,
    assert_api_valid,
    closed_start,
    flat_blocks,
    rule_start,
)
from tests.conftest import FULL_CORPUS, all_transcripts, sweep

TEMPLATE = "# Current State\n_what is going on_\n"
NOTES = TEMPLATE + "Working on the transcript viewer.\n"
CONFIGS = [
    CompactionConfig(),
    CompactionConfig(keep_min_tokens=2_000, keep_min_text_messages=3, keep_max_tokens=6_000),
]
TRANSCRIPTS = all_transcripts()


@cache
def messages_of(path: Path) -> list[Msg]:
    conversation = Conversation(sidechain="subagents" in path.parts)
    with path.open("rb") as f:
        conversation.add_lines(f)
    return [
        Msg.of(
            m.role,
            m.content,
            uuid=m.last_uuid,
            line_uuids=m.uuids,
            tokens=estimate_content(m.content),
        )
        for m in conversation.messages()
    ]


def test_the_corpus_is_there() -> None:
    assert len(TRANSCRIPTS) >= 10
    messages = 1_000 if FULL_CORPUS is not None else 300  # tests/corpus/ alone: 336
    assert sum(len(messages_of(p)) for p in TRANSCRIPTS) > messages


@pytest.mark.parametrize("path", sweep(TRANSCRIPTS))
def test_level1_at_every_cut_point(path: Path) -> None:
    msgs = messages_of(path)
    if not msgs:
        pytest.skip("no active conversation")
    assert api_problems(to_api(msgs)) == []  # the rebuilt conversation itself is valid
    cuts: list[int | None] = [None, *range(len(msgs))]
    for cfg in CONFIGS:
        for cut in cuts:
            covered_end = len(msgs) if cut is None else cut + 1
            uuid = None if cut is None else msgs[cut].uuid
            _check_cut(msgs, cfg, covered_end, uuid)


def _check_cut(msgs: list[Msg], cfg: CompactionConfig, covered_end: int, uuid: str | None) -> None:
    rules = rule_start(
        msgs, covered_end, cfg.keep_min_tokens, cfg.keep_min_text_messages, cfg.keep_max_tokens
    )
    expected = closed_start(msgs, rules)
    outcome = compact_with_notes(
        msgs,
        notes=NOTES,
        template=TEMPLATE,
        last_summarized_uuid=uuid,
        threshold=10**9,
        cfg=cfg,
        estimate=estimate_content,
    )
    if expected == 0:
        assert isinstance(outcome, FallThrough) and outcome.reason == "nothing_to_drop"
        return
    assert isinstance(outcome, Compacted), outcome
    assert outcome.cut_index == expected
    assert_api_valid(to_api(outcome.messages))
    assert flat_blocks(outcome.messages)[1:] == flat_blocks(msgs[expected:])


@pytest.mark.parametrize("path", sweep(TRANSCRIPTS))
def test_microcompact_and_summary_request_stay_valid(path: Path) -> None:
    msgs = messages_of(path)
    if not msgs:
        pytest.skip("no active conversation")
    for keep in (0, 3):
        out = microcompact(msgs, keep_recent=keep, estimate=estimate_content)
        assert_api_valid(to_api(out.messages))
        assert out.tokens_after <= out.tokens_before
    assert_api_valid(build_summary_request(msgs).messages)
