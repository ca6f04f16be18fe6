"""Level 1 compaction: notes in place of covered messages, kept messages by the 10K/5/40K rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memd.compaction import prompts
from memd.compaction.message import Msg, to_api
from memd.compaction.session_memory import (
    Compacted,
    FallThrough,
    compact_with_notes,
    truncate_sections,
)
from memd.config import CompactionConfig
from tests.compaction_support import (
    assert_api_valid,
    closed_start,
    conversations,
    flat_blocks,
    rule_start,
    text_block,
    words_estimate,
)
from tests.conftest import PROFILE_SUPPRESSED

TEMPLATE = "\n".join(
    f"# {title}\n_{hint}_\n"
    for title, hint in [
        ("Session Title", "a short title"),
        ("Current State", "what is happening now"),
        ("Task specification", "what was asked"),
        ("Worklog", "steps taken"),
    ]
)
NOTES = TEMPLATE.replace("_what is happening now_\n", "_what is happening now_\nFixing it.\n")
CFG = CompactionConfig()
NO_LIMIT = 10**9


def run(msgs: list[Msg], uuid: str | None, cfg: CompactionConfig = CFG, **kw: object) -> object:
    args: dict[str, object] = {
        "notes": NOTES,
        "template": TEMPLATE,
        "last_summarized_uuid": uuid,
        "threshold": NO_LIMIT,
        "cfg": cfg,
        "estimate": words_estimate,
    }
    args.update(kw)
    return compact_with_notes(msgs, **args)  # type: ignore[arg-type]


configs = st.builds(
    CompactionConfig,
    keep_min_tokens=st.integers(0, 30_000),
    keep_min_text_messages=st.integers(0, 8),
    keep_max_tokens=st.integers(1, 60_000),
)


@settings(max_examples=100, deadline=None, suppress_health_check=[*PROFILE_SUPPRESSED])
@given(msgs=conversations(), cfg=configs, data=st.data())
def test_level1_keeps_what_the_rules_require_and_stays_valid(
    msgs: list[Msg], cfg: CompactionConfig, data: st.DataObject
) -> None:
    covered = data.draw(st.integers(0, len(msgs)), label="messages covered by the notes")
    uuid = msgs[covered - 1].uuid if covered else None
    covered_end = covered if covered else len(msgs)
    expected = closed_start(
        msgs,
        rule_start(
            msgs, covered_end, cfg.keep_min_tokens, cfg.keep_min_text_messages, cfg.keep_max_tokens
        ),
    )
    outcome = run(msgs, uuid, cfg)
    if expected == 0:
        assert outcome == FallThrough("nothing_to_drop", "every message would be kept")
        return
    assert isinstance(outcome, Compacted)
    assert outcome.cut_index == expected
    assert_api_valid(to_api(outcome.messages))
    notes_block, *rest = flat_blocks(outcome.messages)
    assert "Fixing it." in notes_block["text"]
    assert rest == flat_blocks(msgs[expected:])  # every kept block, unchanged and in order
    assert outcome.kept_count == len(msgs) - expected
    assert outcome.tokens_before == sum(m.tokens for m in msgs)
    kept_tokens = sum(m.tokens for m in msgs[expected:])
    assert outcome.tokens_after == words_estimate(notes_block["text"]) + kept_tokens
    assert outcome.boundary.level == 1
    assert outcome.boundary.pre_tokens == outcome.tokens_before
    assert outcome.boundary.logical_parent_uuid == msgs[-1].uuid


@settings(max_examples=40, deadline=None)
@given(msgs=conversations(), threshold=st.integers(0, 200_000))
def test_a_result_at_or_over_the_threshold_falls_through(msgs: list[Msg], threshold: int) -> None:
    roomy = run(msgs, msgs[len(msgs) // 2].uuid)
    tight = run(msgs, msgs[len(msgs) // 2].uuid, threshold=threshold)
    if isinstance(roomy, Compacted):
        if roomy.tokens_after >= threshold:
            assert isinstance(tight, FallThrough) and tight.reason == "over_threshold"
        else:
            assert tight == roomy


def long_conversation(n: int = 30, tokens: int = 3_000) -> list[Msg]:
    return [
        Msg.of("user" if i % 2 == 0 else "assistant", f"message {i}", uuid=f"u{i}", tokens=tokens)
        for i in range(n)
    ]


def test_keeps_at_least_10k_tokens_and_5_text_messages() -> None:
    msgs = long_conversation()
    outcome = run(msgs, "u28")  # only u29 is newer than the notes
    assert isinstance(outcome, Compacted)
    # 3,000 tokens each: 4 messages reach 10K but 5 text messages are needed.
    assert outcome.cut_index == 25
    assert sum(m.tokens for m in msgs[outcome.cut_index :]) == 15_000


def test_the_hard_cap_wins_over_the_minimums() -> None:
    msgs = [
        Msg.of("user" if i % 2 == 0 else "assistant", f"x{i}", uuid=f"v{i}", tokens=15_000)
        for i in range(12)
    ]
    outcome = run(msgs, "v11")
    assert isinstance(outcome, Compacted)
    # 3 messages = 45,000 >= 40,000: it stops there with only 3 of the 5 text messages.
    assert outcome.cut_index == 9


def test_the_limits_count_as_reached_when_met_exactly() -> None:
    at_cap = run(long_conversation(12, tokens=10_000), "u11")
    assert isinstance(at_cap, Compacted)
    assert at_cap.cut_index == 8  # 4 x 10,000 = 40,000: the cap, with only 4 text messages
    at_minimums = run(long_conversation(12, tokens=2_000), "u11")
    assert isinstance(at_minimums, Compacted)
    assert at_minimums.cut_index == 7  # 5 x 2,000 = 10,000 and 5 text messages


def test_messages_newer_than_the_notes_are_always_kept() -> None:
    msgs = long_conversation(30, tokens=20_000)
    outcome = run(msgs, "u10")
    assert isinstance(outcome, Compacted)
    assert outcome.cut_index == 11  # all 19 newer messages, though far over the 40K cap


def test_a_cut_inside_a_tool_pair_moves_back_to_the_call() -> None:
    msgs = [
        Msg.of("user", "start", uuid="a", tokens=100),
        Msg.of(
            "assistant",
            [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}],
            uuid="b",
            tokens=100,
        ),
        Msg.of(
            "user",
            [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
            uuid="c",
            tokens=50_000,
        ),
    ]
    outcome = run(msgs, "b")
    assert isinstance(outcome, Compacted)
    assert outcome.cut_index == 1
    assert [m.role for m in outcome.messages] == ["user", "assistant", "user"]


def test_a_kept_user_message_first_is_merged_into_the_notes_message() -> None:
    msgs = long_conversation(30)
    outcome = run(msgs, "u23")
    assert isinstance(outcome, Compacted)
    assert outcome.cut_index == 24  # a user message
    first = outcome.messages[0]
    assert first.role == "user"
    assert first.content[1:] == msgs[24].content
    assert_api_valid(to_api(outcome.messages))


def test_unknown_last_summarized_id_falls_through() -> None:
    outcome = run(long_conversation(), "not-there")
    assert isinstance(outcome, FallThrough) and outcome.reason == "id_not_found"


def test_no_notes_and_empty_template_fall_through() -> None:
    msgs = long_conversation()
    for notes in (None, "", "  \n"):
        outcome = run(msgs, "u10", notes=notes)
        assert isinstance(outcome, FallThrough) and outcome.reason == "no_notes"
    padded = "\n" + "\n".join(line + "  " for line in TEMPLATE.splitlines()) + "\n\n"
    outcome = run(msgs, "u10", notes=padded)
    assert isinstance(outcome, FallThrough) and outcome.reason == "empty_template"


def test_without_a_recorded_id_everything_counts_as_covered() -> None:
    outcome = run(long_conversation(), None)
    assert isinstance(outcome, Compacted)
    assert outcome.cut_index == 25  # the minimums, counted from the end


def test_an_id_naming_an_earlier_line_keeps_that_message() -> None:
    msgs = long_conversation(tokens=1)
    msgs[20] = Msg.of("user", "grown", uuid="u20", tokens=1, line_uuids=("early", "u20"))
    outcome = run(msgs, "early", cfg=CompactionConfig(keep_min_tokens=0, keep_min_text_messages=0))
    assert isinstance(outcome, Compacted)
    assert outcome.cut_index == 20


def test_auto_compaction_tells_the_model_to_carry_on() -> None:
    msgs = long_conversation()
    auto = run(msgs, "u10", trigger="auto", transcript_path="/t/s.jsonl")
    manual = run(msgs, "u10", trigger="manual")
    assert isinstance(auto, Compacted) and isinstance(manual, Compacted)
    assert prompts.CONTINUE_INSTRUCTION in auto.messages[0].content[0]["text"]
    assert "/t/s.jsonl" in auto.messages[0].content[0]["text"]
    assert prompts.CONTINUE_INSTRUCTION not in manual.messages[0].content[0]["text"]


def test_oversized_sections_are_cut_with_a_marker() -> None:
    big = "\n".join(f"line {i} " + "x" * 90 for i in range(200))  # ~19,000 characters
    notes = f"# Current State\n_now_\n{big}\n# Worklog\n_steps_\nshort entry\n"
    text, cut = truncate_sections(notes, 8_000)
    assert cut == ("# Current State",)
    state, worklog = text.split("# Worklog")
    assert len(state) <= 8_000 + len("# Current State\n") + len(prompts.SECTION_CUT_MARKER) + 2
    assert prompts.SECTION_CUT_MARKER in state
    assert "line 0 " in state and "line 199 " not in state
    assert worklog == "\n_steps_\nshort entry\n"
    outcome = run(long_conversation(), "u10", notes=notes, notes_path="/n/summary.md")
    assert isinstance(outcome, Compacted)
    assert outcome.truncated_sections == ("# Current State",)
    assert "/n/summary.md" in outcome.messages[0].content[0]["text"]


def test_a_single_overlong_line_is_cut_inside() -> None:
    text, cut = truncate_sections("# A\n" + "y" * 20_000, 8_000)
    assert cut == ("# A",)
    assert text.count("y") == 8_000


def test_headers_inside_code_fences_are_not_sections() -> None:
    notes = "# Workflow\n```sh\n# not a header\n" + "z\n" * 5_000 + "```\n"
    _, cut = truncate_sections(notes, 8_000)
    assert cut == ("# Workflow",)


@settings(max_examples=60, deadline=None)
@given(
    sections=st.lists(
        st.tuples(
            st.text(alphabet="abc ", min_size=1, max_size=10),
            st.lists(st.text(alphabet="abcdef #", max_size=300), max_size=40),
        ),
        min_size=1,
        max_size=6,
    ),
    limit=st.integers(50, 2_000),
)
def test_truncation_bounds_every_section_and_leaves_short_ones_alone(
    sections: list[tuple[str, list[str]]], limit: int
) -> None:
    bodies = ["\n".join(line.lstrip("#") for line in lines) for _, lines in sections]
    titles = [title for title, _ in sections]
    notes = "\n".join(f"# {t}\n{body}" for t, body in zip(titles, bodies, strict=True))
    text, cut = truncate_sections(notes, limit)
    parts = text.split("\n# ")
    assert len(parts) == len(sections)
    for part, body, (title, _) in zip(parts, bodies, sections, strict=True):
        kept = part.split("\n", 1)[1] if "\n" in part else ""
        if len(body) <= limit:
            assert kept == body
        else:
            assert kept.endswith(prompts.SECTION_CUT_MARKER)
            assert len(kept) <= limit + 1 + len(prompts.SECTION_CUT_MARKER)
            assert f"# {title}".strip() in cut


def test_text_messages_count_only_when_they_say_something() -> None:
    blank = [text_block("   ")]
    msgs = [Msg.of("user", "go", uuid="a", tokens=1)]
    msgs += [
        Msg.of("assistant" if i % 2 else "user", blank if i % 2 else "ok", uuid=f"m{i}", tokens=1)
        for i in range(1, 12)
    ]
    cfg = CompactionConfig(keep_min_tokens=0, keep_min_text_messages=3, keep_max_tokens=10**6)
    outcome = run(msgs, msgs[-1].uuid, cfg)
    assert isinstance(outcome, Compacted)
    # Blank assistant messages do not count: 3 user texts need 6 messages.
    assert outcome.cut_index == 6
