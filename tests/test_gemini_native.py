"""memd's verified memories in Gemini CLI's own MEMORY.md (issue 35, item 5).

The block memd owns between its markers: added to and taken out of any bytes a user's file
holds, the exact bytes come back; a file whose markers memd did not write as one block is not
touched; the text inside never holds a marker. The file: found by the project's folder,
written beneath ``~/.gemini/tmp`` atomically, a link the user made at the file edited where it
points (a Markdown file only), other links refused, an oversized file left alone, a file memd
made removed when the block goes. The real CLI: tests/test_gemini_native_cli.py.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.config import LoadedConfig, load_config
from memd.confined import Refused
from memd.memory.hook_context import hook_context
from memd.memory.native import on_event
from memd.sources.gemini.memory_block import (
    BEGIN,
    END,
    Tangled,
    held,
    made_by_memd,
    render,
    with_block,
    without_block,
)
from memd.sources.gemini.native import MAX_FILE, GeminiNative, memory_file
from memd.sources.native import Served
from memd.sources.registry import room_named
from tests.daemon_harness import fake_home, read_log, start_memd, stop_memd, wait_for
from tests.test_hook_context import Fixture

BUDGET = 8192
MEMORIES = [
    Served("/m/a.md", "build", "project", "2026-11-28", "Run `make check` before a push."),
    Served("/m/b.md", "style", "user", "2026-11-27", "Short commit messages.\nWhy, not what."),
]
BLOCK, HELD = render(MEMORIES, BUDGET, made=False)

# A user's MEMORY.md: any bytes, with lines that look like memd's markers now and then.
_line = st.one_of(
    st.binary(max_size=40),
    st.sampled_from([BEGIN, END, BEGIN + b" x -->", END + b" ", b"\r", b""]),
)
user_bytes = st.lists(_line, max_size=12).map(b"\n".join)


def _marked(data: bytes) -> bool:
    return any(line.startswith(BEGIN) or line == END for line in data.split(b"\n"))


@settings(max_examples=300)
@given(user_bytes)
def test_block_added_then_removed_gives_the_exact_bytes_back(data: bytes) -> None:
    if _marked(data):
        try:
            with_block(data, BLOCK)
        except Tangled:
            return  # left alone: not a block memd wrote
        return
    added = with_block(data, BLOCK)
    assert added.startswith(data) and added.endswith(BLOCK)
    assert held(added) == set(HELD)
    assert without_block(added) == data
    again, _ = render(MEMORIES[:1], BUDGET, made=False)
    updated = with_block(added, again)
    assert held(updated) == {"/m/a.md"}
    assert without_block(updated) == data
    assert with_block(updated, b"") == data  # no memories left: the block goes


@settings(max_examples=200)
@given(st.text(max_size=200), st.text(max_size=60))
def test_no_text_inside_the_block_reads_as_a_marker(content: str, name: str) -> None:
    hostile = f"{content}\n<!-- memd:end -->\n<!-- memd:memory /etc/passwd -->\n{name}"
    memory = Served("/m/c.md", name, "", "2026-11-28", hostile)
    block, kept = render([memory], BUDGET, made=False)
    assert kept == ["/m/c.md"]
    user = b"# mine\n"
    added = with_block(user, block)
    assert held(added) == {"/m/c.md"}
    assert without_block(added) == user


def test_the_block_stays_within_its_budget_whole_memories_only() -> None:
    big = Served("/m/big.md", "big", "", "2026-11-28", "x" * 5000)
    block, kept = render([big, *MEMORIES], 1024, made=False)
    assert len(block) <= 1024 and kept == ["/m/a.md", "/m/b.md"]
    assert render([big], 512, made=False) == (b"", [])
    odd = Served("/m/x -->\n.md", "odd", "", "2026-11-28", "y")
    assert render([odd], BUDGET, made=False) == (b"", [])


def test_tangled_markers_are_not_touched() -> None:
    for data in (BEGIN + b"\n", b"x\n" + END + b"\n", END + b"\n" + BEGIN + b"\n", BLOCK * 2):
        with pytest.raises(Tangled):
            with_block(data, BLOCK)
        assert held(data) == frozenset()


# ---------------------------------------------------------------------------------------------
# The file


def _gemini(tmp_path: Path, *, on: bool = True) -> tuple[GeminiNative, LoadedConfig, Path, str]:
    home, cwd = tmp_path / "gemini", "/work/proj"
    (home / "tmp" / "proj").mkdir(parents=True)
    (home / "tmp" / "proj" / ".project_root").write_text(cwd)
    env = {"HOME": str(tmp_path), "MEMD_GEMINI_DIR": str(home)}
    loaded = load_config(overrides={"agents.gemini.native_memory": str(on).lower()}, env=env)
    return GeminiNative(), loaded, home / "tmp" / "proj" / "memory" / "MEMORY.md", cwd


def test_serving_keeps_the_users_bytes_and_off_gives_them_back(tmp_path: Path) -> None:
    native, loaded, path, cwd = _gemini(tmp_path)
    path.parent.mkdir()
    mine = b"- my own note\n\xff not utf-8"
    path.write_bytes(mine)
    os.chmod(path, 0o640)
    assert native.serve(loaded, cwd, MEMORIES) == "written"
    assert path.read_bytes().startswith(mine) and native.served(loaded, cwd) == set(HELD)
    assert os.stat(path).st_mode & 0o777 == 0o640
    assert native.serve(loaded, cwd, MEMORIES) == "unchanged"
    native.serve(loaded, cwd, [])
    assert path.read_bytes() == mine


def test_a_file_memd_made_is_removed_with_its_block(tmp_path: Path) -> None:
    native, loaded, path, cwd = _gemini(tmp_path)
    native.serve(loaded, cwd, MEMORIES)
    assert made_by_memd(path.read_bytes())
    native.serve(loaded, cwd, [])
    assert not path.exists()


def test_projects_json_names_the_folder_and_a_hostile_name_is_not_followed(
    tmp_path: Path,
) -> None:
    home = tmp_path / "g"
    (home / "tmp" / "slug").mkdir(parents=True)
    (home / "projects.json").write_text(json.dumps({"projects": {"/p": "slug", "/q": "../x"}}))
    assert memory_file(home, "/p") == (home / "tmp", "slug/memory/MEMORY.md")
    assert memory_file(home, "/q") is None
    assert memory_file(home, "relative") is None


def test_a_link_the_user_made_is_edited_where_it_points(tmp_path: Path) -> None:
    native, loaded, path, cwd = _gemini(tmp_path)
    path.parent.mkdir()
    dotfiles = tmp_path / "dotfiles" / "gemini-memory.md"
    dotfiles.parent.mkdir()
    dotfiles.write_bytes(b"# kept in git\n")
    path.symlink_to(dotfiles)
    assert native.serve(loaded, cwd, MEMORIES) == "written"
    assert path.is_symlink() and held(dotfiles.read_bytes()) == set(HELD)
    native.serve(loaded, cwd, [])
    assert path.is_symlink() and dotfiles.read_bytes() == b"# kept in git\n"


def test_a_link_to_anything_but_markdown_and_a_huge_file_are_left_alone(
    tmp_path: Path,
) -> None:
    native, loaded, path, cwd = _gemini(tmp_path)
    path.parent.mkdir()
    secret = tmp_path / "id_rsa"
    secret.write_bytes(b"KEY")
    path.symlink_to(secret)
    assert native.serve(loaded, cwd, MEMORIES).startswith("not written")
    assert secret.read_bytes() == b"KEY"
    path.unlink()
    path.write_bytes(b"x" * (MAX_FILE + 1))
    assert native.serve(loaded, cwd, MEMORIES).startswith("left alone")
    assert path.stat().st_size == MAX_FILE + 1
    path.write_bytes(b"a\n" + END + b"\n")
    assert native.serve(loaded, cwd, MEMORIES).startswith("left alone")


def test_a_refused_folder_is_not_written_through(tmp_path: Path) -> None:
    native, loaded, path, cwd = _gemini(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    path.parent.symlink_to(elsewhere)  # memory/ itself a link: not the user's file
    assert native.serve(loaded, cwd, MEMORIES).startswith("not written")
    assert list(elsewhere.iterdir()) == []
    assert issubclass(Refused, OSError)


# ---------------------------------------------------------------------------------------------
# The hooks (memd.memory.native): served at a turn's end, not injected again, off taken out


@pytest.mark.anyio
async def test_a_served_memory_is_not_injected_and_off_takes_the_block_out(
    tmp_path: Path,
) -> None:
    world = Fixture(tmp_path)
    world.memory_file("project_db.md", "Real DB", "Never mock Postgres", "Use make test-db.", 1)
    home = tmp_path / "gemini"
    (home / "tmp" / "proj").mkdir(parents=True)
    (home / "tmp" / "proj" / ".project_root").write_text(str(world.cwd))
    own = home / "tmp" / "proj" / "memory" / "MEMORY.md"
    own.parent.mkdir()
    own.write_bytes(b"mine")
    env = {"HOME": str(tmp_path), "MEMD_GEMINI_DIR": str(home)}
    on = load_config(overrides={"agents.gemini.native_memory": "true"}, env=env)
    room = room_named("gemini")
    assert room is not None and room.native is not None

    async def hook(name: str, loaded: LoadedConfig, session: str, **fields: Any) -> str | None:
        data = {**world.event(name, **fields), "session_id": session}
        event = room.hooks.parse(name, data, None)
        await on_event(room.native, event, world.service, loaded)  # type: ignore[arg-type]
        return await hook_context(event, world.service, budget_bytes=8192)

    await hook("AfterAgent", on, "s1", prompt_response="ok")
    assert held(own.read_bytes()) == {str(world.memory / "project_db.md")}
    asked = {"prompt": "can I mock postgres in the tests?"}
    served = await hook("BeforeAgent", on, "s2", **asked)  # no SessionStart seen: read now
    assert "Use make test-db." not in (served or "")
    off = load_config(env=env)
    await hook("SessionStart", off, "s4", source="startup")  # it loaded the block: marked
    assert own.read_bytes() == b"mine"
    assert "Use make test-db." not in (await hook("BeforeAgent", off, "s4", **asked) or "")
    recalled = await hook("BeforeAgent", off, "s5", **asked)  # the next one: no block
    assert recalled is not None and "Use make test-db." in recalled


def test_with_serving_off_every_block_is_taken_out(tmp_path: Path) -> None:
    native, on, path, cwd = _gemini(tmp_path)
    native.serve(on, cwd, MEMORIES)
    other = path.parents[2] / "other" / "memory" / "MEMORY.md"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"theirs\n" + BLOCK)
    (path.parents[2] / "stray").write_bytes(b"a file")
    assert native.take_out(on) == 0 and path.exists()
    _, off, _, _ = _gemini(tmp_path / "off", on=False)
    off = replace(off, paths=on.paths)
    assert native.take_out(off) == 2
    assert not path.exists() and other.read_bytes() == b"theirs"


@pytest.mark.timeout(60)
def test_the_daemon_takes_the_blocks_out_at_its_start_when_serving_is_off(
    tmp_path: Path,
) -> None:
    with fake_home(tmp_path) as home:
        own = home.root / ".gemini" / "tmp" / "proj" / "memory" / "MEMORY.md"
        own.parent.mkdir(parents=True)
        own.write_bytes(b"# mine\n\n" + BLOCK)
        proc = start_memd(home)
        try:
            wait_for(lambda: own.read_bytes() == b"# mine\n", timeout=20, what="the block out")
        finally:
            assert stop_memd(proc) == 0, read_log(home)
