"""Qwen Code's sessions (memd/sources/qwen/): the files the real CLI 0.24.4 wrote, sessions
generated as Qwen writes them (turns, tool calls, telemetry records between them, a
compression, a rewind) against an oracle of what its model sees, hostile lines, hostile file
names, and its hook dialect."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.compaction.prompts import NOTES_PREAMBLE
from memd.config import MAX_NUMBER
from memd.memory.session_context import opens_with_notes
from memd.sources.hooks import PromptSubmit, SessionStart, TurnEnd, Unhandled
from memd.sources.qwen import Qwen
from memd.sources.qwen.fork import ACK, QwenFork
from memd.sources.qwen.hooks import QwenHooks
from memd.sources.qwen.reader import NO_CWD, QwenReader
from memd.transcript.content import TranscriptChanged
from tests.conftest import AGENTS
from tests.daemon_harness import run_memdctl

SAMPLES = AGENTS / "qwen-code-0.24.4"
TOOLS = SAMPLES / "1e8cce0d-3167-46e4-8fa0-a9e3a0420f00.jsonl"
COMPRESSED = SAMPLES / "f45ffb28-f9f5-42e5-9087-2f4d737b0c9d.jsonl"
CWD = "/home/user/proj"
SUMMARY = NOTES_PREAMBLE + "\n\n<session-notes>\nNOTES_LINE\n</session-notes>"


def offsets(lines: list[bytes]) -> list[tuple[int, bytes]]:
    out, at = [], 0
    for line in lines:
        out.append((at, line))
        at += len(line) + 1
    return out


def read(lines: list[bytes], batch: int = 0) -> tuple[QwenReader, int]:
    """The lines written to a file and read (``batch`` at a time; 0: all at once)."""
    fd, path = tempfile.mkstemp(suffix=".jsonl")
    with os.fdopen(fd, "wb") as file:
        file.write(b"".join(line + b"\n" for line in lines))
    reader = QwenReader(path, 0)
    placed = offsets(lines)
    step = batch or len(placed) or 1
    bad = sum(reader.feed(placed[k : k + step]) for k in range(0, len(placed), step))
    reader.conversation.api_messages()  # read back while the file is there
    return reader, bad


def flat(reader: QwenReader) -> list[tuple[str, str]]:
    """What the model sees, block by block: (role, text, or the tool block's kind and id)."""
    return [b for m in reader.conversation.api_messages() for b in flat_message(m)]


def flat_message(message: dict[str, Any]) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for block in message["content"]:
        kind = block["type"]
        if kind == "text":
            out.append((message["role"], block["text"]))
        else:
            out.append((message["role"], f"{kind}:{block.get('id') or block['tool_use_id']}"))
    return out


def sample(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def test_the_real_cli_sessions_read_as_its_model_saw_them() -> None:
    reader, bad = read(sample(TOOLS))
    assert bad == 0 and reader.cwd == CWD and reader.ignored is None
    call = "toolu_loop000000000002"
    assert flat(reader) == [
        ("user", "Read the README please. ünï"),
        ("assistant", f"tool_use:{call}"),
        ("user", f"tool_result:{call}"),
        ("assistant", "OK."),
        ("user", "What did we learn?"),  # the resume appended to the same file
        ("assistant", "OK."),
    ]
    assert reader.conversation.turn_ends == 2
    assert reader.conversation.context().tokens == 13530  # Qwen's own usage figure

    reader, bad = read(sample(COMPRESSED))
    assert bad == 0
    (boundary,) = reader.conversation.boundaries
    assert boundary.trigger == "manual" and boundary.pre_tokens == 13511
    seen = flat(reader)
    assert [text for _, text in seen][2:] == ["After compress", "OK."]
    assert seen[0][1].startswith("OK.\n\nResume the prior task")  # the compressed history
    assert "MEMD-RECALL" not in json.dumps(seen)  # the hook's context is memd's, not the user's


@pytest.mark.parametrize("path", [TOOLS, COMPRESSED], ids=lambda p: p.name[:8])
def test_every_prefix_reads_without_a_bad_line(path: Path) -> None:
    lines = sample(path)
    for end in range(len(lines) + 1):
        reader, bad = read(lines[:end])
        assert bad == 0
        msgpack.packb(reader.conversation.api_messages())


# ---------------------------------------------------------------------------------------------
# Sessions generated as Qwen writes them, against what its model would see


class Writer:
    """Writes records as Qwen's ChatRecordingService does: each names the last one written
    (``parentUuid``); a rewind sets that back to the parent of the turn it goes back to."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []
        self.last: str | None = None
        self.turn_parents: list[str | None] = []
        self.starts: list[int] = []
        self.n = 0

    def record(self, kind: str, **fields: Any) -> str:
        self.n += 1
        uuid = f"u{self.n:04d}-qwen"
        line = {"uuid": uuid, "parentUuid": self.last, "sessionId": "s", "cwd": CWD}
        line.update(type=kind, timestamp="2026-11-28T11:00:00.000Z", **fields)
        self.lines.append(json.dumps(line, ensure_ascii=False).encode())
        self.last = uuid
        return uuid

    def user(self, text: str) -> None:
        self.turn_parents.append(self.last)
        self.record("user", message={"role": "user", "parts": [{"text": text}]})

    def telemetry(self) -> None:
        self.record("system", subtype="ui_telemetry", systemPayload={"uiEvent": {"x": 1}})


Turn = tuple[str, int, str]  # the prompt, how many tool calls, the answer
# words: the API takes no blank text, and memd leaves blank blocks out for it
texts = st.text(st.characters(codec="utf-8"), min_size=1).filter(lambda t: not t.isspace())
turns = st.lists(st.tuples(texts, st.integers(0, 2), texts), min_size=1, max_size=6)


def write(writer: Writer, turns: list[Turn], start: int) -> list[tuple[str, str]]:
    """The turns written; what the model sees of them (``writer.starts``: where each turn's
    prompt is in it)."""
    seen: list[tuple[str, str]] = []
    for t, (prompt, calls, answer) in enumerate(turns, start):
        writer.starts.append(len(seen))
        writer.user(prompt)
        seen.append(("user", prompt))
        for c in range(calls):
            call = {"functionCall": {"id": f"c{t}-{c}", "name": "read_file", "args": {"p": c}}}
            writer.telemetry()
            writer.record("assistant", message={"role": "model", "parts": [call]})
            writer.telemetry()
            answer_part = {"functionResponse": {"id": f"c{t}-{c}", "name": "read_file"}}
            writer.record("tool_result", message={"role": "user", "parts": [answer_part]})
            seen += [("assistant", f"tool_use:c{t}-{c}"), ("user", f"tool_result:c{t}-{c}")]
        writer.telemetry()
        usage = {"promptTokenCount": 1000 + t, "candidatesTokenCount": 5}
        writer.record(
            "assistant",
            message={
                "role": "model",
                "parts": [{"text": "...", "thought": True}, {"text": answer}],
            },
            usageMetadata=usage,
        )
        seen.append(("assistant", answer))
    return seen


@settings(max_examples=60, deadline=None)
@given(first=turns, later=turns, compress=st.booleans(), rewind=st.integers(0, 5))
def test_generated_sessions_read_as_the_model_sees_them(
    first: list[Turn], later: list[Turn], compress: bool, rewind: int
) -> None:
    writer = Writer()
    seen = write(writer, first, 0)
    if compress:
        history = [
            {"role": "user", "parts": [{"text": "<state_snapshot>so far</state_snapshot>"}]},
            {"role": "model", "parts": [{"text": "Got it."}]},
        ]
        payload = {"info": {"triggerReason": "auto"}, "compressedHistory": history}
        writer.record("system", subtype="chat_compression", systemPayload=payload)
        seen = [("user", "<state_snapshot>so far</state_snapshot>"), ("assistant", "Got it.")]
    elif rewind < len(first):
        # /rewind to turn ``rewind``: what follows continues from before that turn
        writer.last = writer.turn_parents[rewind]
        writer.record("system", subtype="rewind", systemPayload={"targetTurnIndex": rewind})
        seen = seen[: writer.starts[rewind]]
    seen += write(writer, later, len(first))
    for batch in (1, 0):  # line by line, and all at once
        reader, bad = read(writer.lines, batch)
        assert bad == 0
        assert flat(reader) == seen
        assert reader.conversation.turn_ends == len(first) + len(later)


# ---------------------------------------------------------------------------------------------
# Hostile lines

HOSTILE: list[Any] = [2**70, -(2**70), 1e308, None, "x", [], {}, [[[[]]]], True, "\udcff"]


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [at] if at else []
    if isinstance(value, dict):
        for key, inner in value.items():
            found += _paths(inner, (*at, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            found += _paths(inner, (*at, i))
    return found


def _set(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _set(value[path[0]], path[1:], new)
    return copy


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_hostile_lines_are_counted_bad_and_the_rest_is_read(data: st.DataObject) -> None:
    lines = sample(COMPRESSED) + sample(TOOLS)
    k = data.draw(st.integers(0, len(lines) - 1))
    how = data.draw(st.sampled_from(["value", "bytes", "cut", "deep"]))
    if how == "value":
        record = json.loads(lines[k])
        path = data.draw(st.sampled_from(_paths(record)))
        new = data.draw(st.sampled_from(HOSTILE))
        lines[k] = json.dumps(_set(record, path, new)).encode("utf-8", "surrogateescape")
    elif how == "bytes":
        at = data.draw(st.integers(0, len(lines[k])))
        lines[k] = lines[k][:at] + data.draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80"]))
        lines[k] += lines[k][at:]
    elif how == "cut":
        lines[k] = lines[k][: data.draw(st.integers(0, len(lines[k])))]
    else:
        lines[k] = b'{"type": "user", "message": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    reader, bad = read(lines)
    assert 0 <= bad <= 1
    conv = reader.conversation
    assert 0 <= conv.context().tokens <= MAX_NUMBER * 4
    msgpack.packb(conv.api_messages())


def test_a_sub_agents_record_in_a_session_file_is_a_link_not_context() -> None:
    records = [json.loads(line) for line in sample(TOOLS)]
    k = next(i for i, r in enumerate(records) if r["type"] == "user" and i > 0)
    records[k] = {**records[k], "isSidechain": True, "agentId": "general-purpose-x"}
    reader, bad = read([json.dumps(r, ensure_ascii=False).encode() for r in records])
    assert bad == 0
    assert "What did we learn?" not in json.dumps(flat(reader))
    assert reader.conversation.relinked == 0  # the chain passes through it


def test_a_huge_token_count_makes_its_line_bad_not_a_figure() -> None:
    lines = sample(TOOLS)
    records = [json.loads(line) for line in lines]
    k = max(i for i, r in enumerate(records) if r["type"] == "assistant")
    records[k]["usageMetadata"]["promptTokenCount"] = 2**70
    reader, bad = read([json.dumps(r).encode() for r in records])
    assert bad == 1
    assert reader.conversation.context().tokens < 2**63


# ---------------------------------------------------------------------------------------------
# Where sessions are, names included


def test_sessions_are_the_files_of_each_projects_chats_folder(tmp_path: Path) -> None:
    home = tmp_path / ".qwen"
    chats = home / "projects" / "-home-user-proj" / "chats"
    chats.mkdir(parents=True)
    sid = "1e8cce0d-3167-46e4-8fa0-a9e3a0420f00"
    (chats / f"{sid}.jsonl").write_bytes(TOOLS.read_bytes())
    for other in (f"{sid}.ledger.jsonl", f"{sid}.runtime.json", "notes.jsonl"):
        (chats / other).write_bytes(b"{}\n")  # Qwen's files beside a session's: not sessions
    (chats / os.fsdecode(b"\xff\xfe-session.jsonl")).write_bytes(b"")  # not UTF-8: no crash
    elsewhere = tmp_path / "elsewhere" / "chats"
    elsewhere.mkdir(parents=True)
    (elsewhere / "0e8cce0d-3167-46e4-8fa0-a9e3a0420f00.jsonl").write_bytes(b"")
    (home / "projects" / "linked").symlink_to(tmp_path / "elsewhere")
    source = Qwen(home)
    # the linked folder is not followed, the files beside a session are not sessions
    assert [path.name for path, _ in source.walk()] == [f"{sid}.jsonl"]
    key = source.session_key(chats / f"{sid}.jsonl")
    assert key is not None and (key.agent, key.session_id) == ("qwen", sid)
    for other in (f"{sid}.ledger.jsonl", f"{sid}.runtime.json", "x.jsonl"):
        assert source.session_key(chats / other) is None
    assert source.session_key(home / "projects" / f"{sid}.jsonl") is None
    assert source.locate(sid) == chats / f"{sid}.jsonl"
    assert source.locate(f"../chats/{sid}") is None
    reader = source.reader(str(chats / f"{sid}.jsonl"), 0)
    assert reader.ignored == NO_CWD  # until a record says the working dir


# ---------------------------------------------------------------------------------------------
# Its hooks


def test_the_hook_dialect_recalls_only_for_what_the_user_submitted() -> None:
    hooks = QwenHooks()
    base = {"session_id": "s1", "cwd": "/w", "transcript_path": "/t.jsonl"}

    def parse(name: str, **fields: Any) -> Any:
        raw = json.dumps({**base, "hook_event_name": name, **fields}).encode()
        found = hooks.read(raw)
        assert found is not None
        return hooks.parse(found[0], found[1], None)

    prompt = parse("UserPromptSubmit", prompt="Deploy?", submitted_prompt="Deploy?")
    assert prompt == PromptSubmit("UserPromptSubmit", "s1", "/w", prompt="Deploy?")
    # before a tool result goes back to the model: no submitted_prompt
    assert isinstance(parse("UserPromptSubmit", prompt=""), Unhandled)
    assert parse("SessionStart", source="resume") == SessionStart(
        "SessionStart", "s1", "/w", source="resume"
    )
    assert parse("Stop", last_assistant_message="OK.") == TurnEnd("Stop", "s1", "/w", answer="OK.")
    assert isinstance(parse("PreToolUse"), Unhandled)
    assert hooks.read(b"[1]") is None and hooks.read(b"\xff") is None
    out = hooks.output(prompt, "remember: `make ship`")
    assert out is not None
    assert json.loads(out) == {
        "hookSpecificOutput": {
            "hookEventName": "UserPromptSubmit",
            "additionalContext": "remember: `make ship`",
        }
    }
    assert hooks.output(parse("Stop"), "x") is None


# ---------------------------------------------------------------------------------------------
# Its hooks installed by memdctl


def test_install_hooks_edits_a_linked_settings_file_where_it_points(tmp_path: Path) -> None:
    """``~/.qwen/settings.json`` linked from a dotfiles folder: memd's three hooks are
    written in the file it points to, Qwen runs them (its own shape: events, a command, a
    timeout in seconds), the link stays, doctor checks them, and uninstall gives back the
    exact bytes."""
    dotfiles = tmp_path / "dotfiles" / "qwen.json"
    dotfiles.parent.mkdir()
    original = b'{\n  "model": {"name": "qwen3-coder-plus"},\n  "hooks": {"Stop": []}\n}\n'
    dotfiles.write_bytes(original)
    settings = tmp_path / ".qwen" / "settings.json"
    settings.parent.mkdir()
    settings.symlink_to("../dotfiles/qwen.json")
    env = {"HOME": str(tmp_path), "PATH": os.environ["PATH"], "XDG_RUNTIME_DIR": str(tmp_path)}
    done = run_memdctl(env, "install-hooks", "--agent", "qwen")
    assert done.returncode == 0, done.stderr
    assert os.readlink(settings) == "../dotfiles/qwen.json"
    hooks = json.loads(dotfiles.read_text())["hooks"]
    assert sorted(k for k, v in hooks.items() if v) == ["SessionStart", "Stop", "UserPromptSubmit"]
    (entry,) = hooks["UserPromptSubmit"][0]["hooks"]
    assert entry["type"] == "command" and entry["timeout"] == 10
    assert entry["command"].endswith(" qwen")  # the hook names its agent
    doctor = run_memdctl(env, "doctor")
    assert "qwen hooks" in doctor.stdout, doctor.stdout
    data = json.loads(dotfiles.read_text())
    dotfiles.write_text(json.dumps({**data, "disableAllHooks": True}))
    doctor = run_memdctl(env, "doctor")
    line = next(x for x in doctor.stdout.splitlines() if "qwen hooks" in x)
    assert "disableAllHooks" in line, doctor.stdout
    dotfiles.write_text(json.dumps(data, indent=2) + "\n")
    done = run_memdctl(env, "install-hooks", "--agent", "qwen")  # as memd left it
    done = run_memdctl(env, "uninstall-hooks", "--agent", "qwen")
    assert done.returncode == 0, done.stderr
    assert os.readlink(settings) == "../dotfiles/qwen.json"
    assert dotfiles.read_bytes() == original


# ---------------------------------------------------------------------------------------------
# compact --fork: a session Qwen resumes


@pytest.mark.parametrize("path", [TOOLS, COMPRESSED], ids=lambda p: p.name[:8])
def test_the_fork_is_one_compression_record_of_the_notes_then_the_kept_messages(
    path: Path, tmp_path: Path
) -> None:
    chats = tmp_path / "chats"
    chats.mkdir()
    source = chats / path.name
    shutil.copy(path, source)
    old = QwenReader(str(source), source.stat().st_ino)
    assert old.feed(offsets(sample(source))) == 0
    conv = old.conversation
    outline = conv.outline()
    api = conv.api_messages()  # level 1 cuts before a prompt, never before a tool's result
    starts = [i for i, m in enumerate(api) if m["role"] == "user" and m["content"][0].get("text")]
    assert starts
    for cut in starts:
        kept = outline[cut:]
        writer = QwenFork()
        sid = writer.new_id()
        fork = writer.write(conv, kept, session_id=sid, summary=SUMMARY, pre_tokens=1234)
        target = writer.place(source, sid)
        assert target == chats / f"{sid}.jsonl" and Qwen(tmp_path).session_key(target) is None
        target.write_bytes(fork.data)
        new = QwenReader(str(target), target.stat().st_ino)
        assert new.feed(offsets(sample(target))) == 0
        assert new.cwd == CWD and new.ignored is None
        (record,) = [json.loads(line) for line in sample(target)]
        assert record["sessionId"] == sid and record["subtype"] == "chat_compression"
        assert record["systemPayload"]["info"]["originalTokenCount"] == 1234
        kept_flat = [b for m in conv.fill(kept) for b in flat_message(m.to_api())]
        want = [("user", SUMMARY), ("assistant", ACK), *kept_flat]
        assert flat(new) == want
        assert opens_with_notes(new.conversation.messages())
        before = {u: m for m in kept for u in m.uuids}
        after = {u: m for m in new.conversation.outline() for u in m.uuids}
        assert fork.summary_id in after and set(fork.renamed) <= set(before)
        for was, now in fork.renamed.items():
            assert now in after and before[was].role == after[now].role
        target.unlink()


def test_a_line_changed_since_it_was_read_refuses_the_fork(tmp_path: Path) -> None:
    source = tmp_path / TOOLS.name
    shutil.copy(TOOLS, source)
    reader = QwenReader(str(source), source.stat().st_ino)
    reader.feed(offsets(sample(source)))
    conv = reader.conversation
    kept = conv.outline()[-2:]
    data = source.read_bytes().replace(b"What did we learn?", b"What did we learn, again?")
    source.write_bytes(data)
    with pytest.raises(TranscriptChanged):
        QwenFork().write(conv, kept, session_id="x", summary=SUMMARY, pre_tokens=1)
