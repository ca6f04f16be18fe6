"""``compact --fork`` of a Codex session (issue 35, item 4): the room's fork writer, and
the answer that stops Codex's ``/compact`` once memd forked it (the takeover).

The new rollout, read back by memd's reader and by the independent oracle
(tests/agents_oracle.py), is the notes once and then exactly the messages kept, the items as
Codex wrote them; each kept message's id names its item in the new file (the notes the fork
starts with point there); the environment Codex sends again at every resume is not kept
twice; a line that changed since it was read refuses the fork. The real CLI resuming a fork
is in tests/test_agent_forks_cli.py.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from memd.install import codex_hooks
from memd.sources.claude_code.hooks import ClaudeHooks
from memd.sources.codex.fork import CodexFork, uuid7
from memd.sources.codex.hooks import CodexHooks
from memd.sources.codex.reader import CodexReader
from memd.sources.hooks import PreCompact
from memd.transcript.content import TranscriptChanged
from memd.transcript.conversation import Conversation
from memd.transcript.messages import OutlineMessage
from memd.transcript.tail import TailPosition, read_appended
from memd_client.agents.codex import TAKEOVER_HOOKS as CODEX_TAKEOVER
from memd_client.hooks_codex import read_config, trust_entries, trusted_state
from memd_client.hooks_install import is_memd_hook, read_settings
from tests.agents_oracle import read_codex
from tests.test_source_codex import SAMPLES, _flat

SUMMARY = (
    "This conversation continues an earlier one.\n\n<session-notes>\nNOTES_LINE\n</session-notes>"
)
FOLLOWED = [p for p in SAMPLES if not read_codex(p.read_bytes().splitlines()).ignored]
WRITER = CodexFork()


def read(path: Path) -> CodexReader:
    got = read_appended(path, TailPosition(0, 0, 0), max_bytes=1 << 30)
    reader = CodexReader(str(path), got.position.inode)
    assert reader.feed(zip(got.offsets, got.lines, strict=True)) == 0
    return reader


def prompts(conv: Conversation) -> list[int]:
    """Where a kept run may start: a user message that answers no call."""
    return [
        i
        for i, m in enumerate(conv.outline())
        if m.role == "user" and all(part[1][1] != "tool_result" for part in m.parts)
    ]


def fork_file(tmp_path: Path, conv: Conversation, kept: tuple[OutlineMessage, ...]) -> Path:
    sid = WRITER.new_id()
    fork = WRITER.write(conv, kept, session_id=sid, summary=SUMMARY, pre_tokens=1)
    path = WRITER.place(Path(conv.lines.path), sid)  # type: ignore[attr-defined]
    path.write_bytes(fork.data)
    return path


@pytest.mark.parametrize("sample", FOLLOWED, ids=lambda p: p.name[-24:])
def test_the_fork_is_the_notes_then_the_kept_messages(sample: Path, tmp_path: Path) -> None:
    source = tmp_path / sample.name
    shutil.copy(sample, source)
    conv = read(source).conversation
    outline = conv.outline()
    for cut in prompts(conv):
        kept = outline[cut:]
        sid = WRITER.new_id()
        fork = WRITER.write(conv, kept, session_id=sid, summary=SUMMARY, pre_tokens=1)
        path = WRITER.place(source, sid)
        path.write_bytes(fork.data)
        new = read(path)
        assert new.ignored is None and new.cwd == read(source).cwd
        kept_blocks = [
            b
            for b in _flat([m.to_api() for m in conv.fill(kept)])
            if not b[2].startswith("<environment")
        ]
        want = [("user", "text", SUMMARY), *kept_blocks]
        assert _flat(new.conversation.api_messages()) == want
        assert read_codex(fork.data.splitlines()).blocks == want  # as Codex rebuilds it
        # Each kept message's id names the same item in the new file.
        old = {u: m for m in kept for u in m.uuids}
        ids = {u: m for m in new.conversation.outline() for u in m.uuids}
        assert fork.summary_id in ids and set(fork.renamed) <= set(old)
        for was, now in fork.renamed.items():
            assert now in ids and old[was].role == ids[now].role
        path.unlink()


def test_the_meta_is_the_old_sessions_under_the_new_id(tmp_path: Path) -> None:
    source = tmp_path / FOLLOWED[0].name
    shutil.copy(FOLLOWED[0], source)
    conv = read(source).conversation
    path = fork_file(tmp_path, conv, conv.outline()[prompts(conv)[-1] :])
    old = json.loads(source.read_bytes().splitlines()[0])["payload"]
    meta, compacted = (json.loads(line) for line in path.read_bytes().splitlines())
    new = meta["payload"]
    sid = re.fullmatch(r"rollout-[\dT-]+-(.{36})\.jsonl", path.name)
    assert sid is not None and new["id"] == new["session_id"] == sid.group(1)
    assert new["cwd"] == old["cwd"] and new["base_instructions"] == old["base_instructions"]
    assert new["model_provider"] == old["model_provider"]
    assert "history_base" not in new and new["context_window"] != old.get("context_window")
    assert meta["type"] == "session_meta" and compacted["type"] == "compacted"
    assert compacted["payload"]["message"] == SUMMARY
    assert path.parent == source.parent and path.stat().st_size > 0


def test_a_line_changed_since_it_was_read_refuses_the_fork(tmp_path: Path) -> None:
    source = tmp_path / FOLLOWED[0].name
    shutil.copy(FOLLOWED[0], source)
    conv = read(source).conversation
    kept = conv.outline()[prompts(conv)[-1] :]
    data = source.read_bytes()
    line = next(iter(kept[-1].lines()))
    raw = data[line.at : line.at + line.size]
    source.write_bytes(data.replace(raw, raw.replace(b'"', b" ", 1).replace(b"{", b'{"', 1)))
    with pytest.raises(TranscriptChanged):
        WRITER.write(conv, kept, session_id=uuid7(), summary=SUMMARY, pre_tokens=1)


def test_a_rollout_without_its_session_meta_is_not_forked(tmp_path: Path) -> None:
    source = tmp_path / FOLLOWED[0].name
    shutil.copy(FOLLOWED[0], source)
    conv = read(source).conversation
    kept = conv.outline()[prompts(conv)[-1] :]
    first, rest = source.read_bytes().split(b"\n", 1)
    source.write_bytes(first.replace(b'"session_meta"', b'"turn_context"') + b"\n" + rest)
    with pytest.raises(TranscriptChanged, match="session_meta"):
        WRITER.write(conv, kept, session_id=uuid7(), summary=SUMMARY, pre_tokens=1)


def test_thread_ids_are_codex_s_form_and_ordered_in_time() -> None:
    ids = [uuid7() for _ in range(200)]
    assert len(set(ids)) == len(ids)
    assert all(
        re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", i)
        for i in ids
    )
    assert [i[:13] for i in ids] == sorted(i[:13] for i in ids)


def test_the_takeover_stops_codex_s_compaction_in_its_own_dialect() -> None:
    """Codex's PreCompact takes the fields every hook has, not Claude Code's ``decision``:
    ``continue`` false stops its compaction, ``stopReason`` is shown to the user."""
    data = {
        "session_id": "01a221ef-e341-74e0-ab86-73b8b425c2f1",
        "transcript_path": "/home/u/.codex/sessions/2026/11/28/rollout-x.jsonl",
        "cwd": "/home/u/proj",
        "hook_event_name": "PreCompact",
        "trigger": "manual",
    }
    event = CodexHooks().parse("PreCompact", data, None)
    assert isinstance(event, PreCompact) and event.data == data
    said = CodexHooks().output(event, "continue there with: codex resume X")
    assert said is not None
    assert json.loads(said) == {
        "continue": False,
        "stopReason": "continue there with: codex resume X",
    }
    claude = ClaudeHooks().output(ClaudeHooks().parse("PreCompact", data, None), "why")
    assert claude is not None and json.loads(claude) == {"decision": "block", "reason": "why"}
    assert CodexHooks().output(event, "") is None  # nothing to say: Codex compacts as usual


def test_the_takeover_hook_is_installed_and_trusted_only_when_asked(tmp_path: Path) -> None:
    """``install-hooks --agent codex --compact-takeover`` registers memd on PreCompact for
    ``/compact`` with its trust (Codex skips a hook nobody trusted); an install without the
    flag takes it and its trust back, and so does the uninstall."""
    hooks_file, config = tmp_path / "hooks.json", tmp_path / "config.toml"

    def state() -> tuple[dict[str, Any], dict[str, str]]:
        settings = read_settings(hooks_file)
        return settings.get("hooks", {}), trusted_state(read_config(config))

    codex_hooks.install(tmp_path, "/bin/memd-hook")
    hooks, trust = state()
    assert "PreCompact" not in hooks and not any(":pre_compact:" in k for k in trust)
    codex_hooks.install(tmp_path, "/bin/memd-hook", CODEX_TAKEOVER)
    hooks, trust = state()
    (group,) = hooks["PreCompact"]
    assert group["matcher"] == "manual"
    assert group["hooks"] == [{"type": "command", "command": "/bin/memd-hook", "timeout": 5}]
    assert trust == trust_entries(hooks_file, read_settings(hooks_file), is_memd_hook)
    assert any(":pre_compact:" in key for key in trust)
    codex_hooks.install(tmp_path, "/bin/memd-hook")  # without the flag: the takeover goes
    hooks, trust = state()
    assert "PreCompact" not in hooks and not any(":pre_compact:" in k for k in trust)
    codex_hooks.install(tmp_path, "/bin/memd-hook", CODEX_TAKEOVER)
    codex_hooks.uninstall(tmp_path)
    hooks, trust = state()
    assert hooks == {} and trust == {}
