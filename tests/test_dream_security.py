"""The security suite for the dream agent: its tools against a real project tree.

The tree is a Claude Code project folder: transcripts beside the memory dir, a ``.git``
inside the memory dir, the lock files, and a secret outside. Every hostile call (reading a
whole transcript, writing outside the memory dir or into ``.git`` or the lock, shell
writes, deletes that merge nothing) must be denied with the tree hash unchanged; the
transcript search must stay narrow, capped and scrubbed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from memd.agent.tools import Tool, ToolResult
from memd.dream.lock import LOCK_NAME
from memd.dream.tools import dream_tools
from memd.dream.transcripts import MAX_MATCHES, MAX_OUTPUT_CHARS
from memd.sources.base import DreamScope, any_session
from tests.dream_support import recorder_for
from tests.test_security import tree_hash

pytestmark = pytest.mark.anyio

SECRET = "TOP-SECRET-7f3a"
KEY = "sk-ant-api03-" + "A1b2C3d4" * 6


def build(root: Path) -> tuple[Path, Path, Path]:
    """(root, project folder, memory dir); the run folder lives outside the tree."""
    project = root / "projects" / "-work-proj"
    memory = project / "memory"
    (memory / ".git" / "hooks").mkdir(parents=True)
    (memory / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (memory / "MEMORY.md").write_text("- [Note](note.md) — a note\n")
    (memory / "note.md").write_text("---\nname: n\ndescription: d\ntype: user\n---\nhi\n")
    (memory / LOCK_NAME).write_text("")
    lines = [
        json.dumps({"type": "user", "message": {"content": f"deploy step {n} {SECRET}"}})
        for n in range(5000)
    ]
    lines.append(json.dumps({"message": f"token {KEY} <private>hidden words</private> deploy"}))
    (project / "s1.jsonl").write_text("\n".join(lines) + "\n")
    (root / "secret.txt").write_text(SECRET)
    return root, project, memory


@pytest.fixture
def area(tmp_path: Path) -> tuple[Path, dict[str, Tool]]:
    root, project, memory = build(tmp_path / "tree")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tools, _ = dream_tools(
        memory, recorder_for(memory, run_dir), [DreamScope(project, any_session)]
    )
    return root, tools


async def attack(area: tuple[Path, dict[str, Tool]], tool: str, args: dict[str, Any]) -> ToolResult:
    root, tools = area
    before = tree_hash(root)
    with anyio.fail_after(20):
        result = await tools[tool].run(args)
    assert tree_hash(root) == before, f"{tool} {args} changed the tree"
    return result


TRANSCRIPT = "../s1.jsonl"
ATTACKS: list[tuple[str, dict[str, Any]]] = [
    ("Read", {"file_path": TRANSCRIPT}),
    ("Read", {"file_path": "{project}/s1.jsonl"}),
    ("Grep", {"pattern": "deploy", "path": ".."}),
    ("Grep", {"pattern": "deploy", "path": TRANSCRIPT, "output_mode": "content"}),
    ("Glob", {"pattern": "*.jsonl", "path": ".."}),
    ("Shell", {"command": f"cat {TRANSCRIPT}"}),
    ("Shell", {"command": f"head -c 100000 {TRANSCRIPT}"}),
    ("Shell", {"command": "grep -r deploy .."}),
    ("Write", {"file_path": "../evil.md", "content": "x"}),
    ("Write", {"file_path": "huge.md", "content": "x" * 3_000_000}),
    ("Edit", {"file_path": "note.md", "old_string": "hi", "new_string": "x" * 3_000_000}),
    ("Write", {"file_path": "{root}/secret.txt", "content": "x"}),
    ("Edit", {"file_path": TRANSCRIPT, "old_string": "deploy", "new_string": "x"}),
    ("Write", {"file_path": ".git/config", "content": "[core]\n\tfsmonitor = /bin/sh\n"}),
    ("Write", {"file_path": ".git/hooks/pre-commit", "content": "#!/bin/sh\n"}),
    ("Edit", {"file_path": ".git/HEAD", "old_string": "main", "new_string": "evil"}),
    ("Delete", {"file_path": ".git/HEAD", "merged_into": "note.md"}),
    ("Write", {"file_path": LOCK_NAME, "content": "1"}),
    ("Write", {"file_path": LOCK_NAME + ".flock", "content": "1"}),
    ("Write", {"file_path": LOCK_NAME + ".x.tmp", "content": "1"}),
    ("Delete", {"file_path": LOCK_NAME, "merged_into": "note.md"}),
    ("Delete", {"file_path": "note.md"}),
    ("Delete", {"file_path": "note.md", "merged_into": "MEMORY.md"}),  # not written this run
    ("Delete", {"file_path": "note.md", "merged_into": "note.md"}),
    ("Delete", {"file_path": TRANSCRIPT, "merged_into": "note.md"}),
    ("Shell", {"command": "sed -i s/hi/x/ note.md"}),
    ("Shell", {"command": "find . -delete"}),
    ("Shell", {"command": "tee note.md"}),
    ("Shell", {"command": "cp note.md copy.md"}),
    ("Shell", {"command": "rm note.md"}),
    ("Shell", {"command": "echo x > note.md"}),
    ("Shell", {"command": "git commit -am x"}),
    ("Shell", {"command": "git -C . init"}),
    ("TranscriptGrep", {"pattern": "de"}),
    ("TranscriptGrep", {"pattern": "  a  "}),
    ("TranscriptGrep", {"pattern": "x" * 201}),
    ("TranscriptGrep", {"pattern": "line\nbreak"}),
    ("TranscriptGrep", {"pattern": 5}),
]


@pytest.mark.parametrize(
    ("tool", "args"), ATTACKS, ids=[f"{t}-{i}" for i, (t, _) in enumerate(ATTACKS)]
)
async def test_dream_attack_is_denied(
    area: tuple[Path, dict[str, Tool]], tool: str, args: dict[str, Any]
) -> None:
    root = area[0]
    project = root / "projects" / "-work-proj"
    filled = {
        k: v.format(root=root, project=project) if isinstance(v, str) else v
        for k, v in args.items()
    }
    result = await attack(area, tool, filled)
    assert result.is_error, result.content
    assert SECRET not in result.content and "deploy step" not in result.content


async def test_transcript_search_is_narrow_capped_and_scrubbed(
    area: tuple[Path, dict[str, Tool]],
) -> None:
    result = await attack(area, "TranscriptGrep", {"pattern": "deploy"})
    assert not result.is_error
    assert len(result.content) <= MAX_OUTPUT_CHARS + 400
    assert result.content.count("\n") <= MAX_MATCHES + 1
    assert "more matches not shown" in result.content
    hit = await attack(area, "TranscriptGrep", {"pattern": "token "})
    assert "token" in hit.content and KEY not in hit.content
    private = await attack(area, "TranscriptGrep", {"pattern": "hidden words"})
    assert "hidden words" not in private.content
    regex = await attack(area, "TranscriptGrep", {"pattern": "(a+)+$"})
    assert regex.content == "No matches found"  # literal text, never a backtracking regex
    edge = await attack(area, "TranscriptGrep", {"pattern": "A1b2C3d4A1b2"})
    assert "A1b2C3d4" not in edge.content  # a secret cut by the excerpt never leaks a piece


async def test_a_merge_delete_is_allowed_and_journaled(tmp_path: Path) -> None:
    _, project, memory = build(tmp_path / "tree")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tools, written = dream_tools(
        memory, recorder_for(memory, run_dir), [DreamScope(project, any_session)]
    )
    body = "---\nname: n\ndescription: merged\ntype: user\n---\nhi and more\n"
    wrote = await tools["Write"].run({"file_path": "merged.md", "content": body})
    assert not wrote.is_error and written.paths == {"merged.md"}
    gone = await tools["Delete"].run({"file_path": "note.md", "merged_into": "merged.md"})
    assert not gone.is_error, gone.content
    assert not (memory / "note.md").exists()
    journal = (run_dir / "journal.jsonl").read_text()
    assert '"merged_into": "merged.md"' in journal


async def test_team_memories_are_never_deleted_and_nothing_personal_is_promoted(
    tmp_path: Path,
) -> None:
    """team/ is shared with the repository's collaborators (issue 25): the dream's tools,
    not only its prompt, refuse to delete a team memory or to add one, and a personal memory
    merged into a team one; a team memory already there may still be edited."""
    _, project, memory = build(tmp_path / "tree")
    team = memory / "team"
    team.mkdir()
    shared = "---\nname: ci\ndescription: how CI runs\nmetadata:\n  type: project\n---\nCI.\n"
    (team / "ci.md").write_text(shared)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tools, _ = dream_tools(
        memory, recorder_for(memory, run_dir), [DreamScope(project, any_session)]
    )
    body = "---\nname: n\ndescription: d\nmetadata:\n  type: user\n---\nhi\n"
    delete = await tools["Delete"].run({"file_path": "team/ci.md", "merged_into": "note.md"})
    assert delete.is_error and "never deletes" in delete.content
    promote = await tools["Write"].run({"file_path": "team/note.md", "content": body})
    assert promote.is_error and "never promotes" in promote.content
    assert not (team / "note.md").exists()
    edit = await tools["Write"].run({"file_path": "team/ci.md", "content": shared + "More.\n"})
    assert not edit.is_error, edit.content
    merged = await tools["Delete"].run({"file_path": "note.md", "merged_into": "team/ci.md"})
    assert merged.is_error and "never promoted" in merged.content
    assert (memory / "note.md").exists() and (team / "ci.md").read_text() == shared + "More.\n"


async def test_a_conflict_copy_is_deleted_once_merged_into_the_memory_it_names(
    tmp_path: Path,
) -> None:
    """A team sync keeps both versions of a memory two teammates changed (issue 37): the
    copy names its original in metadata.reconcile_with, and the dream may delete that copy
    once it has merged it there, and no other team memory, nor into anything else."""
    _, project, memory = build(tmp_path / "tree")
    team = memory / "team"
    team.mkdir()
    shared = "---\nname: ci\ndescription: how CI runs\nmetadata:\n  type: project\n---\nCI.\n"
    (team / "ci.md").write_text(shared)
    (team / "other.md").write_text(shared)
    copy = shared.replace("  type: project\n", '  type: project\n  reconcile_with: "team/ci.md"\n')
    (team / "ci.conflict-0a1b2c3d.md").write_text(copy + "Also nightly.\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tools, _ = dream_tools(
        memory, recorder_for(memory, run_dir), [DreamScope(project, any_session)]
    )
    merged = shared + "Also nightly.\n"
    assert not (await tools["Write"].run({"file_path": "team/ci.md", "content": merged})).is_error
    await tools["Write"].run({"file_path": "team/other.md", "content": merged})
    wrong = await tools["Delete"].run(
        {"file_path": "team/ci.conflict-0a1b2c3d.md", "merged_into": "team/other.md"}
    )
    assert wrong.is_error and (team / "ci.conflict-0a1b2c3d.md").exists()
    other = await tools["Delete"].run({"file_path": "team/other.md", "merged_into": "team/ci.md"})
    assert other.is_error and "never deletes" in other.content
    done = await tools["Delete"].run(
        {"file_path": "team/ci.conflict-0a1b2c3d.md", "merged_into": "team/ci.md"}
    )
    assert not done.is_error, done.content
    assert not (team / "ci.conflict-0a1b2c3d.md").exists() and (team / "other.md").exists()
