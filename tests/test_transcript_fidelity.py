"""Generated transcripts, every prefix: memd's conversation is valid for the API and agrees
with the independent oracle (issue 9 item 6, issue 15 item 2)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memd.testing.api_rules import request_problems
from memd.transcript.conversation import Conversation
from tests.transcript_oracle import load, read_values

TOOL_IDS = ["t1", "t2", "t3", "t4"]
MESSAGE_IDS = ["m1", "m2", "m3"]

_blocks = (
    st.sampled_from(
        [
            {"type": "text", "text": "hello"},
            {"type": "text", "text": "\n\n"},
            {"type": "text", "text": ""},
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}},
            {"type": "server_tool_use", "id": "s1", "name": "web"},
            {"type": "tool_use", "id": "t1", "name": "Bash"},  # no input: malformed
            {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}},
        ]
    )
    | st.builds(
        lambda i: {"type": "tool_use", "id": i, "name": "Bash", "input": {"command": "ls"}},
        st.sampled_from(TOOL_IDS),
    )
    | st.builds(
        lambda i, c: {"type": "tool_result", "tool_use_id": i, "content": c},
        st.sampled_from(TOOL_IDS),
        st.sampled_from(
            ["ok", "", [{"type": "text", "text": " "}], [{"type": "text", "text": "y"}]]
        ),
    )
)


@st.composite
def transcripts(draw: st.DrawFn) -> list[bytes]:
    lines: list[bytes] = []
    uuids: list[str] = []
    for n in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["user", "user", "assistant", "assistant", "progress", "sys"]))
        parent_choice = draw(st.sampled_from(["prev", "prev", "prev", "none", "dangling", "old"]))
        parent: str | None = uuids[-1] if uuids else None
        if parent_choice == "none":
            parent = None
        elif parent_choice == "dangling":
            parent = f"missing-{n}"
        elif parent_choice == "old" and uuids:
            parent = draw(st.sampled_from(uuids))
        uuid = draw(st.sampled_from([f"e{n}", f"e{n}", f"e{max(0, n - 1)}"]))  # some repeats
        entry: dict[str, Any] = {"type": kind, "uuid": uuid, "parentUuid": parent}
        if draw(st.integers(0, 9)) == 0:
            entry["isSidechain"] = True
        if kind == "sys":
            entry["type"] = "system"
            entry["subtype"] = draw(st.sampled_from(["compact_boundary", "turn_duration"]))
        elif kind == "user":
            content: Any = draw(st.lists(_blocks, max_size=3) | st.sampled_from(["hi", "", " "]))
            entry["message"] = {"role": "user", "content": content}
        elif kind == "assistant":
            entry["message"] = {
                "id": draw(st.sampled_from(MESSAGE_IDS)),
                "model": draw(st.sampled_from(["claude", "claude", "<synthetic>"])),
                "content": draw(st.lists(_blocks, max_size=2)),
                "usage": {"input_tokens": n, "output_tokens": draw(st.integers(0, 5))},
            }
        lines.append(json.dumps(entry).encode())
        uuids.append(uuid)
    return lines


# ~10 s on a quiet machine; the generous limit is for a loaded 2-core one (every prefix is
# checked against the oracle, so the cost grows with the square of the transcript's length).
def _line(n: int, kind: str, parent: str | None, content: Any, **extra: Any) -> bytes:
    entry: dict[str, Any] = {"type": kind, "uuid": f"e{n}", "parentUuid": parent, **extra}
    if kind == "assistant":
        entry["message"] = {"id": "m1", "model": "claude", "content": content, "usage": {}}
    else:
        entry["message"] = {"role": "user", "content": content}
    return json.dumps(entry).encode()


_CALL = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
_HELLO = [{"type": "text", "text": "hello"}]

# Seed 15, shrunk: in a sub-agent's own file, one response (m1) written as text, an empty user
# line, then a call the next (empty) user line does not answer. The abandoned call's line
# contributes nothing, so it is not one of the message's lines.
_ABANDONED_CALL_AFTER_EMPTY_USER_LINE = [
    _line(0, "user", None, "hi", isSidechain=True),
    _line(1, "assistant", "e0", _HELLO, isSidechain=True),
    _line(2, "user", "e1", [], isSidechain=True),
    _line(3, "assistant", "e2", [_CALL], isSidechain=True),
    _line(4, "user", "e3", [], isSidechain=True),
]
# Seed 16, shrunk: the same in a main file, where the lines are linked through skipped
# sidechain entries and a dangling parent (each relinks to the previous main entry).
_ABANDONED_CALL_ACROSS_SIDECHAIN_LINKS = [
    _line(0, "user", None, _HELLO),
    _line(1, "user", "e0", [], isSidechain=True),
    _line(2, "assistant", "e1", _HELLO),
    _line(3, "user", "e2", [], isSidechain=True),
    _line(4, "user", "e3", []),
    _line(5, "assistant", "e4", [_CALL]),
    _line(6, "user", "missing-6", []),
]
# Seed 1, shrunk: a file that starts with a response; the result answering it goes with it (a
# conversation starts with the user), and an empty response then parts that result's line
# from the next prompt. The result's line is not one of the prompt's lines.
_RESULT_OF_LEADING_RESPONSE_BEFORE_A_PROMPT = [
    _line(0, "assistant", None, [_CALL]),
    _line(1, "user", "e0", [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]),
    _line(2, "user", "e1", []),
    _line(3, "assistant", "e2", []),
    _line(4, "user", "e3", "hi"),
]


@pytest.mark.timeout(600)
@settings(max_examples=300)
@given(lines=transcripts(), sidechain=st.booleans())
@example(lines=_ABANDONED_CALL_AFTER_EMPTY_USER_LINE, sidechain=True)
@example(lines=_ABANDONED_CALL_ACROSS_SIDECHAIN_LINKS, sidechain=False)
@example(lines=_RESULT_OF_LEADING_RESPONSE_BEFORE_A_PROMPT, sidechain=False)
def test_every_prefix_is_valid_and_agrees_with_the_oracle(
    lines: list[bytes], sidechain: bool
) -> None:
    conversation = Conversation(sidechain=sidechain)
    values = [load(line) for line in lines]
    for end, line in enumerate(lines, start=1):
        conversation.add_lines([line])
        messages = conversation.api_messages()
        if messages:
            body = {"model": "m", "max_tokens": 1, "messages": messages}
            assert request_problems(body, strict_alternation=True) == [], end
        expected = read_values(values[:end], sidechain_file=sidechain)
        assert [e.uuid for e in conversation.active_chain()] == expected.chain, end
        assert [list(m.uuids) for m in conversation.messages()] == expected.message_uuids, end
        assert [m.role for m in conversation.messages()] == expected.roles, end
        assert list(conversation.pending_uuids) == expected.pending, end
        figure = conversation.context()
        assert (figure.tokens, figure.stale) == (expected.context_tokens, expected.stale), end
