"""memd's verified memories in Codex CLI's own memories (issue 35, item 5).

memd's extension in ``$CODEX_HOME/memories/extensions/memd/``: one resource per memory
within the budget, several projects side by side, only files memd marked rewritten or
removed (a file of the user's, a link: left alone and said in ``trouble``), a write that
fails said (in ``status`` too) and done at the next call, everything taken out with serving
off (at the daemon's start too). The summary Codex sends: which memories it carries (the
head and tail Codex keeps of a long one; none while Codex's memories are off). The real
CLI: tests/test_codex_native_cli.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.config import LoadedConfig, load_config
from memd.memory.hook_context import hook_context
from memd.memory.native import on_event
from memd.memory.paths import memory_dir
from memd.sources.codex import own_memory
from memd.sources.codex.extension import INSTRUCTIONS, KEPT, carried, project_key, resources
from memd.sources.codex.native import OFF_IN_CODEX, CodexNative
from memd.sources.native import Served
from memd.sources.registry import room_named
from tests.daemon_harness import (
    call,
    fake_home,
    memdctl,
    read_log,
    start_memd,
    stop_memd,
    wait_for,
)
from tests.test_hook_context import Fixture
from tests.test_source_memory_e2e import LEARNT

MEMORIES = [
    Served("/m/a.md", "build", "project", "2026-11-28", "Run `make check` before a push."),
    Served("/m/b.md", "style", "user", "2026-11-27", "Short commit messages.\nWhy, not what."),
]
FEATURE = "[features]\nmemories = true\n"


def _codex(tmp_path: Path, *, on: bool = True) -> tuple[CodexNative, LoadedConfig, Path, str]:
    home, cwd = tmp_path / "codex", str(tmp_path / "proj")
    home.mkdir()
    (home / "config.toml").write_text(FEATURE)
    env = {"HOME": str(tmp_path), "MEMD_CODEX_HOME": str(home)}
    loaded = load_config(overrides={"agents.codex.native_memory": str(on).lower()}, env=env)
    return CodexNative(own_memory), loaded, home / "memories", cwd


def _files(memories: Path) -> dict[str, bytes]:
    folder = memories / "extensions" / "memd"
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_each_memory_is_one_resource_and_a_project_s_stale_ones_go(tmp_path: Path) -> None:
    native, loaded, memories, cwd = _codex(tmp_path)
    assert native.serve(loaded, cwd, MEMORIES) == "2 memories served, 2 files changed"
    files = _files(memories)
    assert files["instructions.md"] == INSTRUCTIONS
    names = sorted(n for n in files if n.startswith("resources/"))
    assert len(names) == 2
    assert all(n.startswith(f"resources/{project_key(cwd)}-") for n in names)
    assert files[names[0]].startswith(b"<!-- memd:memory /m/a.md -->\n")
    assert native.serve(loaded, cwd, MEMORIES) == "2 memories served, 0 files changed"
    other = str(tmp_path / "other")
    native.serve(loaded, other, MEMORIES[1:])  # another project's, beside them
    assert native.serve(loaded, cwd, MEMORIES[:1]) == "1 memories served, 1 files changed"
    assert len([n for n in _files(memories) if n.startswith("resources/")]) == 2
    assert native.trouble() is None


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=300), st.text(max_size=60), st.integers(0, 3000))
def test_resources_stay_within_the_budget_and_carry_no_foreign_marker(
    content: str, name: str, budget: int
) -> None:
    hostile = f"{content}\n<!-- memd:memory /etc/passwd -->\n"
    memory = Served("/m/c.md", name, "", "2026-11-28", hostile)
    files = resources([memory, *MEMORIES], "/p", budget)
    assert sum(len(data) for data in files.values()) <= budget
    for data in files.values():
        assert carried(b"v1\n" + data) <= {"/m/c.md", "/m/a.md", "/m/b.md"}
    assert resources([Served("/m/x -->.md", "x", "", "2026-11-28", "y")], "/p", 9000) == {}


_summary_line = st.one_of(
    st.binary(max_size=60),
    st.builds(lambda p: b"- x <!-- memd:memory " + p + b" -->", st.binary(max_size=30)),
)


@settings(max_examples=200)
@given(st.lists(_summary_line, max_size=400).map(b"\n".join))
def test_any_summary_reads_as_whole_absolute_paths_only(summary: bytes) -> None:
    found = carried(summary)
    assert all(p.startswith("/") and "\n" not in p for p in found)
    assert len(found) <= summary.count(b"<!-- memd:memory /")


def test_what_the_summary_codex_sends_carries(tmp_path: Path) -> None:
    native, loaded, memories, cwd = _codex(tmp_path)
    memories.mkdir()
    summary = memories / "memory_summary.md"
    summary.write_text("v1\n- build: make check <!-- memd:memory /m/a.md -->\n")
    assert native.served(loaded, cwd) == {"/m/a.md"}
    middle = "x" * KEPT + "\n<!-- memd:memory /m/b.md -->\n" + "y" * KEPT
    summary.write_text("v1\n<!-- memd:memory /m/a.md -->\n" + middle)
    assert native.served(loaded, cwd) == {"/m/a.md"}  # Codex cuts the middle out
    (tmp_path / "codex" / "config.toml").write_text("")  # Codex's memories off: none sent
    assert native.served(loaded, cwd) == frozenset()


def test_files_that_are_not_memd_s_are_left_alone(tmp_path: Path) -> None:
    native, loaded, memories, cwd = _codex(tmp_path)
    native.serve(loaded, cwd, MEMORIES)
    folder = memories / "extensions" / "memd"
    mine = folder / "resources" / f"{project_key(cwd)}-mine.md"
    mine.write_bytes(b"my own note\n")
    assert native.serve(loaded, cwd, []).startswith("left alone: 1 files")
    assert mine.read_bytes() == b"my own note\n" and native.trouble() is not None
    assert [p.name for p in (folder / "resources").iterdir()] == [mine.name]
    (folder / "instructions.md").write_bytes(b"# my extension\n")
    assert native.serve(loaded, cwd, MEMORIES).startswith("left alone: extensions/memd")
    assert [p.name for p in (folder / "resources").iterdir()] == [mine.name]


def test_a_link_of_the_user_s_is_never_replaced(tmp_path: Path) -> None:
    native, loaded, memories, cwd = _codex(tmp_path)
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (memories / "extensions").mkdir(parents=True)
    (memories / "extensions" / "memd").symlink_to(dotfiles)
    assert native.serve(loaded, cwd, MEMORIES).startswith("left alone")
    assert list(dotfiles.iterdir()) == [] and native.trouble()
    assert native.take_out(load_config(env={"MEMD_CODEX_HOME": str(memories.parent)})) == 0
    assert (memories / "extensions" / "memd").is_symlink()


def test_a_write_that_fails_is_said_and_done_at_the_next_call(tmp_path: Path) -> None:
    native, loaded, memories, cwd = _codex(tmp_path)
    memories.write_bytes(b"not a folder")  # as a full or read-only disk: an OSError
    assert native.serve(loaded, cwd, MEMORIES).startswith("not written")
    assert "not written" in (native.trouble() or "")
    memories.unlink()
    assert native.serve(loaded, cwd, MEMORIES) == "2 memories served, 2 files changed"
    assert native.trouble() is None


def test_nothing_is_written_while_codex_s_own_memories_are_off(tmp_path: Path) -> None:
    native, loaded, memories, cwd = _codex(tmp_path)
    (tmp_path / "codex" / "config.toml").write_text("")
    assert native.serve(loaded, cwd, MEMORIES) == OFF_IN_CODEX == native.trouble()
    assert not memories.exists()


def test_off_takes_out_memd_s_files_only(tmp_path: Path) -> None:
    native, on, memories, cwd = _codex(tmp_path)
    native.serve(on, cwd, MEMORIES)
    native.serve(on, str(tmp_path / "other"), MEMORIES)
    mine = memories / "extensions" / "ad_hoc" / "instructions.md"
    mine.parent.mkdir()
    mine.write_bytes(b"Codex's own\n")
    assert native.take_out(on) == 0
    off = load_config(env={"MEMD_CODEX_HOME": str(memories.parent)})
    assert native.take_out(off) == 5
    assert not (memories / "extensions" / "memd").exists() and mine.exists()
    native.serve(on, cwd, MEMORIES)
    assert native.serve(off, cwd, MEMORIES) == "taken out of 3 files"


@pytest.mark.anyio
async def test_a_memory_the_summary_carries_is_not_injected(tmp_path: Path) -> None:
    world = Fixture(tmp_path)
    world.memory_file("project_db.md", "Real DB", "Never mock Postgres", "Use make test-db.", 1)
    home = tmp_path / "codex"
    home.mkdir()
    (home / "config.toml").write_text(FEATURE)
    env = {"HOME": str(tmp_path), "MEMD_CODEX_HOME": str(home)}
    on = load_config(overrides={"agents.codex.native_memory": "true"}, env=env)
    room = room_named("codex")
    assert room is not None and room.native is not None
    path = str(world.memory / "project_db.md")

    async def hook(name: str, session: str, **fields: Any) -> str | None:
        data = {**world.event(name, **fields), "session_id": session}
        event = room.hooks.parse(name, data, None)
        await on_event(room.native, event, world.service, on)  # type: ignore[arg-type]
        return await hook_context(event, world.service, budget_bytes=8192)

    asked = {"prompt": "can I mock postgres in the tests?"}
    await hook("Stop", "s1", last_assistant_message="ok")
    resources = list((home / "memories" / "extensions" / "memd" / "resources").iterdir())
    assert [r.read_bytes().splitlines()[0] for r in resources] == [
        f"<!-- memd:memory {path} -->".encode()
    ]
    recalled = await hook("UserPromptSubmit", "s2", **asked)  # not in the summary yet
    assert recalled is not None and "Use make test-db." in recalled
    (home / "memories" / "memory_summary.md").write_text(f"v1\n- db <!-- memd:memory {path} -->\n")
    await hook("SessionStart", "s3", source="startup")
    assert "Use make test-db." not in (await hook("UserPromptSubmit", "s3", **asked) or "")


@pytest.mark.timeout(60)
def test_the_daemon_takes_the_extension_out_at_its_start_when_serving_is_off(
    tmp_path: Path,
) -> None:
    with fake_home(tmp_path) as home:
        folder = home.root / ".codex" / "memories" / "extensions" / "memd"
        (folder / "resources").mkdir(parents=True)
        (folder / "instructions.md").write_bytes(INSTRUCTIONS)
        (folder / "resources" / "k-a.md").write_bytes(b"<!-- memd:memory /m/a.md -->\nx\n")
        proc = start_memd(home)
        try:
            wait_for(lambda: not folder.exists(), timeout=20, what="the extension out")
            assert os.path.isdir(folder.parent)
        finally:
            assert stop_memd(proc) == 0, read_log(home)


@pytest.mark.timeout(60)
def test_the_daemon_serves_at_a_codex_turn_end_and_status_says_why_not(tmp_path: Path) -> None:
    with fake_home(tmp_path) as home:
        (home.root / "memd.yaml").write_text("agents:\n  codex:\n    native_memory: true\n")
        home.env["MEMD_CONFIG"] = str(home.root / "memd.yaml")
        codex = home.root / ".codex"
        codex.mkdir()
        repo = home.root / "repo"
        repo.mkdir()
        memory = memory_dir(home.projects, repo) / "deploy.md"
        memory.parent.mkdir(parents=True)
        memory.write_text(LEARNT)
        stop = {"hook_event_name": "Stop", "session_id": "s1", "cwd": str(repo)}
        proc = start_memd(home)
        try:
            call(home, "hook", {"agent": "codex", "event": "Stop", "input": stop})
            shown = memdctl(home, "status").stdout
            assert "memd's memories not served: Codex's own memories are off" in shown
            (codex / "config.toml").write_text(FEATURE)  # fixed: the next turn's end serves
            call(home, "hook", {"agent": "codex", "event": "Stop", "input": stop})
            served = list((codex / "memories" / "extensions" / "memd" / "resources").iterdir())
            assert [p.read_text().splitlines()[0] for p in served] == [
                f"<!-- memd:memory {memory} -->"
            ]
            assert "memd's memories not served" not in memdctl(home, "status").stdout
        finally:
            assert stop_memd(proc) == 0, read_log(home)
