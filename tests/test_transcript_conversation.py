"""Rebuilding the active conversation: branches, compaction, parallel tools, context size."""

from __future__ import annotations

import json
from typing import Any

import pytest

from memd.tokens import estimate_content
from memd.transcript.conversation import Conversation

_UNSET: Any = object()


class Transcript:
    """Writes transcript lines the way Claude Code does; each call returns the new uuid."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.last: str | None = None
        self._n = 0

    def _add(self, entry: dict[str, Any], parent: str | None) -> str:
        self._n += 1
        uuid = entry.pop("uuid", None) or f"e{self._n}"
        entry = {
            "uuid": uuid,
            "parentUuid": self.last if parent is _UNSET else parent,
            "timestamp": f"2026-02-01T10:00:{self._n:02d}.000Z",
            "cwd": "/work/project",
            "sessionId": "s1",
            **entry,
        }
        self.lines.append(json.dumps(entry).encode())
        self.last = uuid
        return uuid

    def user(self, content: Any, *, parent: Any = _UNSET, **extra: Any) -> str:
        return self._add(
            {"type": "user", "message": {"role": "user", "content": content}, **extra}, parent
        )

    def result(self, tool_id: str, text: str = "done", *, parent: Any = _UNSET) -> str:
        block = {"type": "tool_result", "tool_use_id": tool_id, "content": text}
        return self.user([block], parent=parent, toolUseResult={"stdout": text * 50})

    def assistant(
        self,
        message_id: str,
        block: dict[str, Any],
        *,
        usage: tuple[int, int, int, int] = (10, 1_000, 20_000, 50),
        model: str = "claude-opus-4-6",
        parent: Any = _UNSET,
        **extra: Any,
    ) -> str:
        given, written, read, output = usage
        message = {
            "id": message_id,
            "role": "assistant",
            "model": model,
            "content": [block],
            "usage": {
                "input_tokens": given,
                "cache_creation_input_tokens": written,
                "cache_read_input_tokens": read,
                "output_tokens": output,
            },
        }
        return self._add({"type": "assistant", "message": message, **extra}, parent)

    def system(self, subtype: str, *, parent: Any = _UNSET, **extra: Any) -> str:
        return self._add({"type": "system", "subtype": subtype, **extra}, parent)

    def progress(self, *, parent: Any = _UNSET) -> str:
        return self._add({"type": "progress", "data": {"type": "hook_progress"}}, parent)

    def conversation(self, *, sidechain: bool = False) -> Conversation:
        conversation = Conversation(sidechain=sidechain)
        conversation.add_lines(self.lines)
        return conversation


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool(tool_id: str, name: str = "Bash") -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": {"command": "ls"}}


def _uuids(conversation: Conversation) -> list[str]:
    return [entry.uuid for entry in conversation.active_chain()]


def test_a_rewound_branch_leaves_the_conversation() -> None:
    t = Transcript()
    first = t.user("build it", parent=None)
    reply = t.assistant("m1", text("which way?"))
    t.user("the slow way")
    t.assistant("m2", text("ok, slowly"))
    retry = t.user("the fast way", parent=reply)
    last = t.assistant("m3", text("ok, fast"))
    conversation = t.conversation()
    assert _uuids(conversation) == [first, reply, retry, last]
    assert [m["content"][0]["text"] for m in conversation.api_messages()] == [
        "build it",
        "which way?",
        "the fast way",
        "ok, fast",
    ]


def test_progress_lines_link_the_chain_but_are_not_messages() -> None:
    t = Transcript()
    t.progress(parent=None)
    t.user("hi")
    t.progress()
    t.assistant("m1", text("hello"))
    t.system("stop_hook_summary")
    conversation = t.conversation()
    assert [type(e).__name__ for e in conversation.active_chain()] == [
        "UserEntry",
        "AssistantEntry",
        "SystemEntry",
    ]
    assert conversation.entry_count == 5
    assert conversation.message_count == 2
    assert conversation.turn_ends == 1


def test_a_compact_boundary_starts_a_new_context() -> None:
    t = Transcript()
    t.user("long work", parent=None)
    before = t.assistant("m1", text("worked"), usage=(5, 0, 150_000, 400))
    boundary = t.system(
        "compact_boundary",
        parent=None,
        logicalParentUuid=before,
        compactMetadata={"trigger": "auto", "preTokens": 150_500},
    )
    summary = "This session continues an earlier one. " * 40
    t.user(summary, isCompactSummary=True, isVisibleInTranscriptOnly=True)
    conversation = t.conversation()

    assert conversation.api_messages() == [{"role": "user", "content": [text(summary)]}]
    figure = conversation.context()
    assert figure.stale and figure.from_usage == 0
    assert figure.tokens == figure.estimated_tail == estimate_content(summary)
    [seen] = conversation.boundaries
    assert (seen.uuid, seen.trigger, seen.pre_tokens) == (boundary, "auto", 150_500)
    assert seen.logical_parent_uuid == before
    assert seen.context_before.tokens == 150_405 and not seen.context_before.stale

    t.assistant("m2", text("continuing"), usage=(3, 2_000, 30_000, 20))
    fresh = t.conversation().context()
    assert not fresh.stale and fresh.tokens == 32_023


@pytest.mark.parametrize("post", [38_000, -1, 10**30, "many", None])
def test_after_a_boundary_the_context_is_at_least_what_claude_code_says_it_left(
    post: Any,
) -> None:
    """Claude Code 2.1.332 writes the context its compaction left (``postTokens``, system
    prompt and tools counted, which an estimate of the lines cannot): the figure until the
    next answer is never below it. A figure that is no count is not taken; one out of a
    count's range makes the line bad, as ``preTokens`` does."""
    t = Transcript()
    t.user("long work", parent=None)
    t.assistant("m1", text("worked"), usage=(5, 0, 150_000, 400))
    meta: dict[str, Any] = {"trigger": "auto", "preTokens": 150_500, "postTokens": post}
    t.system("compact_boundary", parent=None, compactMetadata=meta)
    summary = "This session continues an earlier one. " * 40
    t.user(summary, isCompactSummary=True)
    conversation = t.conversation()
    figure = conversation.context()
    if post in (-1, 10**30):  # out of a count's range: a bad line, as any such figure
        assert conversation.bad_lines == 1 and not conversation.boundaries
        return
    assert figure.stale and figure.from_usage == 0
    estimated = estimate_content(summary)
    assert figure.tokens == figure.estimated_tail == (38_000 if post == 38_000 else estimated)


def test_the_walk_stops_at_a_boundary_even_if_it_names_a_parent() -> None:
    t = Transcript()
    t.user("old", parent=None)
    t.assistant("m1", text("old reply"))
    boundary = t.system("compact_boundary", compactMetadata={"trigger": "manual"})
    t.user("new")
    assert _uuids(t.conversation())[0] == boundary


def test_a_parent_missing_at_the_start_of_the_file_is_a_root() -> None:
    t = Transcript()
    first = t.user("context from elsewhere", parent="not-in-this-file")
    second = t.assistant("m1", text("ok"))
    assert _uuids(t.conversation()) == [first, second]


def test_a_dangling_parent_mid_file_links_to_the_previous_entry() -> None:
    """anthropics/claude-code#24304: progress entries whose parent is in no file."""
    t = Transcript()
    t.user("hello")
    t.assistant("m1", text("hi"), usage=(10, 0, 40_000, 50))
    progress = t.progress(parent="never-written")
    t.user("and now?")
    conversation = t.conversation()
    assert conversation.relinked == 1
    assert conversation.last_uuid != progress  # the user line after it is the leaf
    assert len(conversation.active_chain()) == 3  # walked through the relinked progress line
    assert conversation.message_count == 3
    assert conversation.context().from_usage == 40_060


def test_a_boundary_after_a_dangling_parent_keeps_the_context_before_it() -> None:
    t = Transcript()
    t.user("hello")
    t.assistant("m1", text("hi"), usage=(10, 0, 90_000, 50))
    t.progress(parent="never-written")
    t.system("compact_boundary", parent=None, compactMetadata={"trigger": "auto"})
    (boundary,) = t.conversation().boundaries
    assert boundary.context_before.from_usage == 90_060


def test_a_self_parent_cannot_make_a_cycle() -> None:
    t = Transcript()
    t.user("a")
    t.user("b", uuid="me", parent="me")
    assert _uuids(t.conversation()) == ["e1", "me"]


def test_a_parent_cycle_does_not_hang() -> None:
    t = Transcript()
    t.user("a", uuid="x", parent="y")
    t.user("b", uuid="y", parent="x")
    assert len(t.conversation().active_chain()) == 2


def test_inline_sidechain_entries_never_enter_the_main_conversation() -> None:
    t = Transcript()
    t.user("look around", parent=None)
    call = t.assistant("m1", tool("t1", "Task"))
    side = [
        t.user("sub-agent task", parent=None, isSidechain=True),
        t.assistant("s1", text("sub-agent work"), isSidechain=True),
    ]
    t.result("t1", "summary of findings", parent=call)
    t.assistant("m2", text("found it"), usage=(1, 0, 5_000, 10))
    t.user("late sidechain line", parent=side[-1], isSidechain=True)  # the newest line
    conversation = t.conversation()
    assert not set(side) & set(_uuids(conversation))
    assert conversation.message_count == 4
    assert conversation.context().from_usage == 5_011


def test_a_subagent_transcript_is_read_as_its_own_conversation() -> None:
    t = Transcript()
    t.user("sub-agent task", parent=None, isSidechain=True)
    t.assistant("s1", text("done"), isSidechain=True, usage=(1, 0, 800, 5))
    assert t.conversation().message_count == 0
    conversation = t.conversation(sidechain=True)
    assert conversation.message_count == 2
    assert conversation.context().tokens == 806


def test_parallel_tool_calls_become_one_message_and_one_reply() -> None:
    t = Transcript()
    t.user("check both", parent=None)
    thinking = t.assistant("m1", {"type": "thinking", "thinking": "both", "signature": "s"})
    blank = t.assistant("m1", text("\n\n"))
    first = t.assistant("m1", tool("t1"))
    t.progress()
    r1 = t.result("t1", "one", parent=first)
    second = t.assistant("m1", tool("t2"), parent=first)
    r2 = t.result("t2", "two", parent=second)
    t.user([text("also this")], parent=r2)
    t.assistant("m2", text("both fine"), parent=t.last)
    conversation = t.conversation()
    messages = conversation.messages()
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert [b["type"] for b in messages[1].content] == ["thinking", "tool_use", "tool_use"]
    assert messages[1].uuids == (thinking, blank, first, second)
    assert messages[1].last_uuid == second
    assert [b.get("tool_use_id", b.get("text")) for b in messages[2].content] == [
        "t1",
        "t2",
        "also this",
    ]
    assert {r1, r2} <= set(_uuids(conversation))
    assert conversation.tool_use_count == 2
    assert not conversation.pending_tool_use_ids()


def test_tool_results_off_the_walked_path_are_taken_back() -> None:
    """Claude Code parents each result to its own tool_use line; the walk sees only one."""
    t = Transcript()
    t.user("read three files", parent=None)
    calls = [t.assistant("m1", tool("t1", "Read"))]
    calls.append(t.assistant("m1", tool("t2", "Read")))
    calls.append(t.assistant("m1", tool("t3", "Read")))
    r3 = t.result("t3", parent=calls[2])
    r1 = t.result("t1", parent=calls[0])
    r2 = t.result("t2", parent=calls[1])
    t.assistant("m2", text("read them"), parent=r2)
    chain = set(_uuids(t.conversation()))
    assert {r1, r2, r3, *calls} <= chain
    messages = t.conversation().api_messages()
    assert [b["tool_use_id"] for b in messages[2]["content"]] == ["t3", "t1", "t2"]


def test_context_is_the_last_response_usage_plus_an_estimate_of_what_came_after() -> None:
    t = Transcript()
    t.user("go", parent=None)
    t.assistant("m1", text("thinking aloud"), usage=(4, 500, 40_000, 3))
    t.assistant("m1", tool("t1"), usage=(4, 500, 40_000, 172))
    output = "line of build output\n" * 200
    t.result("t1", output)
    t.assistant("bad", text("API Error: 500"), model="<synthetic>", usage=(0, 0, 0, 0))
    figure = t.conversation().context()
    assert figure.from_usage == 4 + 500 + 40_000 + 172
    tail = estimate_content([{"type": "tool_result", "tool_use_id": "t1", "content": output}])
    assert figure.estimated_tail == tail > 100
    assert figure.tokens == figure.from_usage + tail and not figure.stale


def test_a_conversation_without_any_response_is_estimated() -> None:
    t = Transcript()
    t.user("first prompt", parent=None)
    figure = t.conversation().context()
    assert figure.tokens == estimate_content("first prompt") > 0
    assert figure.from_usage == 0 and not figure.stale
    empty = Conversation().context()
    assert (empty.tokens, empty.stale, Conversation().message_count) == (0, False, 0)


def test_synthetic_responses_are_not_messages() -> None:
    t = Transcript()
    t.user("hi", parent=None)
    t.assistant("m1", text("hello"))
    t.user("[Request interrupted by user]")
    t.assistant("x", text("No response requested."), model="<synthetic>")
    t.user("go on")
    conversation = t.conversation()
    assert [m["role"] for m in conversation.api_messages()] == ["user", "assistant", "user"]
    assert conversation.api_messages()[2]["content"] == [
        text("[Request interrupted by user]"),
        text("go on"),
    ]


def test_counters_for_the_note_triggers() -> None:
    t = Transcript()
    t.user("fix the tests", parent=None)
    t.assistant("m1", tool("t1"))
    mark = t.result("t1")
    t.assistant("m2", tool("t2"))
    t.result("t2")
    t.assistant("m3", tool("t3"))
    conversation = t.conversation()
    assert conversation.tool_use_count == 3
    assert conversation.tool_calls_since(mark) == 2
    assert conversation.tool_calls_since("compacted-away") == 3
    assert conversation.tool_calls_since(None) == 3
    assert conversation.last_assistant_has_tool_calls
    assert conversation.pending_tool_use_ids() == {"t3"}
    t.result("t3")
    t.assistant("m4", text("all green"))
    t.system("turn_duration", durationMs=1200)
    t.system("local_command", content="<local-command-stdout/>")
    done = t.conversation()
    assert not done.last_assistant_has_tool_calls
    assert done.turn_ends == 1
    assert done.last_uuid == t.last
    assert done.cwd == "/work/project" and done.session_id == "s1"
    assert done.last_timestamp == "2026-02-01T10:00:10.000Z"


def test_derived_values_are_cached_until_the_next_entry() -> None:
    t = Transcript()
    t.user("hi", parent=None)
    t.assistant("m1", text("hello"))
    conversation = t.conversation()
    assert conversation.context() is conversation.context()
    assert conversation.active_chain() is conversation.active_chain()
    before = conversation.context()
    conversation.add_lines(
        [
            json.dumps(
                {"type": "user", "uuid": "n", "parentUuid": t.last, "message": {"content": "more"}}
            ).encode()
        ]
    )
    assert conversation.context() != before


def test_a_repeated_uuid_is_counted_and_ignored() -> None:
    t = Transcript()
    t.user("hi", parent=None)
    t.lines.append(t.lines[0])
    conversation = t.conversation()
    assert conversation.duplicates == 1 and conversation.entry_count == 1


def test_bad_lines_are_counted() -> None:
    conversation = Conversation()
    conversation.add_lines([b"{not json", b"[]", b'{"type": "summary"}'])
    conversation.count_bad_lines(2)
    assert conversation.bad_lines == 4
    assert conversation.entry_count == 0


def test_view_is_a_snapshot_that_later_lines_do_not_change() -> None:
    """Readers on other threads get a view; the live conversation may keep growing."""
    from tests.conftest import CORPUS

    lines = (CORPUS / "spotter" / "short.jsonl").read_bytes().splitlines()
    conv = Conversation()
    conv.add_lines(lines[: len(lines) // 2])
    view = conv.view()
    before = [m.to_api() for m in view.messages()]
    conv.add_lines(lines[len(lines) // 2 :])
    assert [m.to_api() for m in view.messages()] == before
    assert view.last_uuid != conv.last_uuid
    assert [m.to_api() for m in conv.view().messages()] == conv.api_messages()


def test_parallel_calls_still_waiting_are_held_back_and_reported_pending() -> None:
    t = Transcript()
    t.user("run both", parent=None)
    first = t.assistant("m1", tool("t1"))
    result = t.result("t1")
    second = t.assistant("m1", tool("t2"), parent=result)
    conversation = t.conversation()
    assert [m["role"] for m in conversation.api_messages()] == ["user"]
    assert conversation.pending_tool_use_ids() == {"t2"}
    assert conversation.pending_uuids == (first, second, result)
    t.result("t2")
    done = t.conversation()
    assert [m["role"] for m in done.api_messages()] == ["user", "assistant", "user"]
    assert done.pending_tool_use_ids() == frozenset() and done.pending_uuids == ()


def test_a_call_the_conversation_moved_on_from_is_left_out() -> None:
    """An interrupt without a tool_result, then a new prompt: no unanswered tool_use."""
    t = Transcript()
    t.user("do it", parent=None)
    t.assistant("m1", text("Let me look."))
    t.assistant("m1", tool("t1"))
    t.user("stop, do something else")
    messages = t.conversation().api_messages()
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [text("Let me look.")]


def test_two_responses_in_a_row_become_one_valid_message() -> None:
    t = Transcript()
    t.user("go", parent=None)
    t.assistant("m1", tool("t1"))
    t.assistant("m2", text("Answer without the tool."))
    messages = t.conversation().api_messages()
    assert messages == [
        {"role": "user", "content": [text("go")]},
        {"role": "assistant", "content": [text("Answer without the tool.")]},
    ]


def test_blank_text_and_malformed_blocks_never_reach_the_api() -> None:
    t = Transcript()
    t.user([text("  "), {"type": "tool_result"}, text("real question")], parent=None)
    t.assistant("m1", text("\n\n"))
    t.assistant("m1", {"type": "tool_use", "id": "t1", "name": "Bash"})  # no input
    t.assistant("m1", {"type": "server_tool_use", "id": "s"})
    conversation = t.conversation()
    assert conversation.api_messages() == [{"role": "user", "content": [text("real question")]}]


def test_a_response_without_a_prompt_before_it_is_left_out() -> None:
    t = Transcript()
    t.assistant("m0", tool("t0"), parent=None)
    t.result("t0")
    t.user("hello")
    t.assistant("m1", text("hi"))
    messages = t.conversation().api_messages()
    assert messages == [
        {"role": "user", "content": [text("hello")]},
        {"role": "assistant", "content": [text("hi")]},
    ]


def test_a_repeated_tool_use_id_is_called_once() -> None:
    t = Transcript()
    t.user("go", parent=None)
    t.assistant("m1", tool("t1"))
    t.result("t1")
    t.assistant("m2", tool("t1"))
    t.result("t1")
    t.assistant("m3", text("done"))
    messages = t.conversation().api_messages()
    calls = [b["id"] for m in messages for b in m["content"] if b["type"] == "tool_use"]
    assert calls == ["t1"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
