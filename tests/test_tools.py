"""The sub-agent tools: behaviour on a real temporary tree."""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memd.agent.files import FileLimits, Problem, apply_edit, numbered
from memd.agent.permissions import EditOnlyFile, MemoryDirPolicy, Policy, ReadOnly
from memd.agent.process import ShellLimits
from memd.agent.search import glob_regex, split_glob_root
from memd.agent.tools import FunctionTool, Tool, ToolContext, ToolResult, make_tools, policy_tools

pytestmark = pytest.mark.anyio

ALL = ("Read", "Edit", "Write", "Delete", "Grep", "Glob", "Shell")


@pytest.fixture
def area(tmp_path: Path) -> Path:
    mem = tmp_path / "mem"
    (mem / "sub").mkdir(parents=True)
    (tmp_path / "ro").mkdir()
    (tmp_path / "secret.md").write_text("password=hunter2\n")
    (mem / "a.md").write_text("alpha\nbeta\nalpha\n")
    (mem / "sub" / "b.md").write_text("Beta in sub\n")
    (mem / "sub" / "c.txt").write_text("gamma\n")
    (tmp_path / "ro" / "ref.md").write_text("reference beta\n")
    return tmp_path


def tools_for(area: Path, policy: Policy | None = None, **file_limits: int) -> dict[str, Tool]:
    policy = policy or MemoryDirPolicy(area / "mem", (area / "ro",))
    return make_tools(
        policy,
        ALL,
        cwd=area / "mem",
        limits=ShellLimits(timeout_s=5),
        file_limits=FileLimits(**file_limits),
    )


async def call(tools: Mapping[str, Tool], name: str, **args: Any) -> ToolResult:
    with anyio.fail_after(30):
        result = await tools[name].run(args)
    assert isinstance(result, ToolResult)
    return result


# ---------------------------------------------------------------------------------------------
# Read


async def test_read_numbers_lines(area: Path) -> None:
    result = await call(tools_for(area), "Read", file_path="a.md")
    assert result.content == "     1\talpha\n     2\tbeta\n     3\talpha"
    assert not result.is_error and result.touched == ()


async def test_read_window_and_continuation(area: Path) -> None:
    (area / "mem" / "long.md").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    result = await call(tools_for(area), "Read", file_path="long.md", offset=10, limit=3)
    lines = result.content.splitlines()
    assert lines[:3] == ["    10\tline 10", "    11\tline 11", "    12\tline 12"]
    assert "offset=13" in lines[3]
    past = await call(tools_for(area), "Read", file_path="long.md", offset=500)
    assert "100 lines" in past.content


async def test_read_cuts_long_lines_and_reads_read_roots(area: Path) -> None:
    (area / "mem" / "wide.md").write_text("x" * 50 + "\n")
    result = await call(tools_for(area, read_max_line_chars=10), "Read", file_path="wide.md")
    assert result.content == "     1\t" + "x" * 10 + " [line cut at 10 characters]"
    ref = await call(tools_for(area), "Read", file_path=str(area / "ro" / "ref.md"))
    assert "reference beta" in ref.content


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("empty", "(the file is empty)"),
        ("binary", "binary"),
        ("dir", "is a directory"),
        ("missing", "does not exist"),
        ("fifo", "not a regular file"),
    ],
)
async def test_read_special_files(area: Path, setup: str, expected: str) -> None:
    path = area / "mem" / "thing"
    match setup:
        case "empty":
            path.write_text("")
        case "binary":
            path.write_bytes(b"\x00\x01\x02")
        case "dir":
            path.mkdir()
        case "fifo":
            os.mkfifo(path)
    result = await call(tools_for(area), "Read", file_path="thing")
    assert expected in result.content
    assert result.is_error is (setup != "empty")


async def test_read_denied_outside(area: Path) -> None:
    result = await call(tools_for(area), "Read", file_path="../secret.md")
    assert result.is_error and result.denied
    assert "hunter2" not in result.content and str(area / "mem") in result.content


async def test_bad_arguments_are_reported(area: Path) -> None:
    tools = tools_for(area)
    assert "file_path must be a string" in (await call(tools, "Read")).content
    bad = await call(tools, "Read", file_path="a.md", offset=0)
    assert bad.is_error and "offset" in bad.content
    flag = await call(
        tools, "Edit", file_path="a.md", old_string="a", new_string="b", replace_all=1
    )
    assert flag.is_error and "replace_all" in flag.content


# ---------------------------------------------------------------------------------------------
# Edit


async def test_edit_replaces_a_unique_match(area: Path) -> None:
    result = await call(
        tools_for(area), "Edit", file_path="a.md", old_string="beta", new_string="B"
    )
    assert not result.is_error
    assert (area / "mem" / "a.md").read_text() == "alpha\nB\nalpha\n"
    assert result.touched == (str(area / "mem" / "a.md"),)


async def test_edit_ambiguous_match_says_how_many(area: Path) -> None:
    result = await call(
        tools_for(area), "Edit", file_path="a.md", old_string="alpha", new_string="A"
    )
    assert result.is_error and "2 times" in result.content and "replace_all" in result.content
    assert (area / "mem" / "a.md").read_text() == "alpha\nbeta\nalpha\n"
    everywhere = await call(
        tools_for(area),
        "Edit",
        file_path="a.md",
        old_string="alpha",
        new_string="A",
        replace_all=True,
    )
    assert "2 occurrence" in everywhere.content
    assert (area / "mem" / "a.md").read_text() == "A\nbeta\nA\n"


async def test_edit_missing_text_is_recoverable(area: Path) -> None:
    result = await call(
        tools_for(area), "Edit", file_path="a.md", old_string="zeta", new_string="z"
    )
    assert result.is_error and "not found" in result.content and result.touched == ()


async def test_edit_preserves_mode_and_leaves_no_temp_files(area: Path) -> None:
    path = area / "mem" / "a.md"
    path.chmod(0o640)
    await call(tools_for(area), "Edit", file_path="a.md", old_string="beta", new_string="b")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in (area / "mem").iterdir()) == ["a.md", "sub"]


async def test_edit_creates_with_empty_old_string(area: Path) -> None:
    tools = tools_for(area)
    result = await call(tools, "Edit", file_path="new.md", old_string="", new_string="hi")
    assert not result.is_error and "created" in result.content
    assert (area / "mem" / "new.md").read_text() == "hi"
    again = await call(tools, "Edit", file_path="new.md", old_string="", new_string="x")
    assert again.is_error


async def test_edit_only_file_policy(area: Path) -> None:
    notes = area / "notes" / "summary.md"
    notes.parent.mkdir()
    notes.write_text("# Current State\n_what now_\n\n")
    (area / "mem" / "summary.md").write_text("other\n")
    tools = make_tools(EditOnlyFile(notes), ["Edit", "Read"], cwd=notes.parent)
    ok = await call(
        tools,
        "Edit",
        file_path=str(notes),
        old_string="_what now_\n",
        new_string="_what now_\ndone\n",
    )
    assert not ok.is_error and "done" in notes.read_text()
    for path in (str(area / "mem" / "summary.md"), "../mem/summary.md"):
        denied = await call(tools, "Edit", file_path=path, old_string="other", new_string="x")
        assert denied.denied and f"only use the Edit tool on {notes}" in denied.content
    assert (await call(tools, "Read", file_path=str(notes))).denied
    assert (area / "mem" / "summary.md").read_text() == "other\n"


@given(
    st.text(alphabet="ab\n", max_size=12), st.text(alphabet="ab", max_size=3), st.text(max_size=3)
)
def test_apply_edit_properties(content: str, old: str, new: str) -> None:
    result = apply_edit(content, old, new, replace_all=False)
    if isinstance(result, Problem):
        assert old == new or not old or content.count(old) != 1
    else:
        assert content.count(old) == 1
        before, _, after = content.partition(old)
        assert result == before + new + after


def test_numbered_matches_cat_n() -> None:
    assert numbered(7, "x", max_chars=5) == "     7\tx"


# ---------------------------------------------------------------------------------------------
# Write and Delete


async def test_write_creates_parents_inside(area: Path) -> None:
    result = await call(tools_for(area), "Write", file_path="new/deeper/n.md", content="hello")
    path = area / "mem" / "new" / "deeper" / "n.md"
    assert not result.is_error and path.read_text() == "hello"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert result.touched == (str(path),)


async def test_write_creates_the_root_but_nothing_above_it(tmp_path: Path) -> None:
    policy = MemoryDirPolicy(tmp_path / "missing" / "mem")
    tools = make_tools(policy, ["Write"], cwd=tmp_path)
    result = await call(tools, "Write", file_path="x.md", content="x")
    assert result.denied and not (tmp_path / "missing").exists()
    (tmp_path / "missing").mkdir()
    created = await call(tools, "Write", file_path="x.md", content="x")
    assert not created.is_error and (tmp_path / "missing" / "mem" / "x.md").read_text() == "x"


async def test_write_overwrites_and_refuses_read_roots(area: Path) -> None:
    tools = tools_for(area)
    await call(tools, "Write", file_path="a.md", content="new")
    assert (area / "mem" / "a.md").read_text() == "new"
    denied = await call(tools, "Write", file_path=str(area / "ro" / "ref.md"), content="x")
    assert denied.denied and (area / "ro" / "ref.md").read_text() == "reference beta\n"


async def test_a_3_mb_memory_file_is_refused(area: Path) -> None:
    tools = tools_for(area)
    big = "x" * 3_000_000
    result = await call(tools, "Write", file_path="big.md", content=big)
    assert result.is_error and result.touched == ()
    assert "would hold 3000000 bytes" in result.content
    assert f"at most {FileLimits().write_max_file_bytes} bytes" in result.content
    assert not (area / "mem" / "big.md").exists()
    grown = await call(tools, "Edit", file_path="a.md", old_string="beta", new_string=big)
    assert grown.is_error and "at most" in grown.content
    assert (area / "mem" / "a.md").read_text() == "alpha\nbeta\nalpha\n"
    fits = await call(tools, "Write", file_path="ok.md", content="y" * 200_000)
    assert not fits.is_error


async def test_writes_have_a_budget_per_run(area: Path) -> None:
    tools = tools_for(area, write_max_run_bytes=10_000)
    for name in ("n0.md", "n1.md"):
        assert not (await call(tools, "Write", file_path=name, content="z" * 4000)).is_error
    over = await call(tools, "Write", file_path="n2.md", content="z" * 4000)
    assert over.is_error and "this run has written 8000 bytes" in over.content
    assert "at most 10000" in over.content and not (area / "mem" / "n2.md").exists()
    edit = await call(
        tools, "Edit", file_path="n0.md", old_string="z", new_string="yy", replace_all=True
    )
    assert edit.is_error and "this run has written" in edit.content
    assert (area / "mem" / "n0.md").read_text() == "z" * 4000
    next_run = tools_for(area, write_max_run_bytes=10_000)
    assert not (await call(next_run, "Write", file_path="n2.md", content="z" * 4000)).is_error


async def test_delete_needs_allow_delete(area: Path) -> None:
    denied = await call(tools_for(area), "Delete", file_path="a.md")
    assert denied.denied and (area / "mem" / "a.md").exists()
    policy = MemoryDirPolicy(area / "mem", allow_delete=True)
    tools = tools_for(area, policy)
    result = await call(tools, "Delete", file_path="a.md")
    assert not result.is_error and not (area / "mem" / "a.md").exists()
    assert result.touched == (str(area / "mem" / "a.md"),)
    assert (await call(tools, "Delete", file_path="sub")).is_error
    assert (area / "mem" / "sub").is_dir()


# ---------------------------------------------------------------------------------------------
# Grep and Glob


async def test_grep_modes(area: Path) -> None:
    tools = tools_for(area)
    mem = area / "mem"
    files = await call(tools, "Grep", pattern="beta")
    assert files.content == str(mem / "a.md")
    ci = await call(tools, "Grep", pattern="beta", case_insensitive=True)
    assert ci.content.splitlines() == [str(mem / "a.md"), str(mem / "sub" / "b.md")]
    content = await call(tools, "Grep", pattern="alpha", output_mode="content")
    assert content.content.splitlines() == [f"{mem / 'a.md'}:1:alpha", f"{mem / 'a.md'}:3:alpha"]
    count = await call(tools, "Grep", pattern="a", output_mode="count", glob="*.txt")
    assert count.content == f"{mem / 'sub' / 'c.txt'}:1"
    ro = await call(tools, "Grep", pattern="beta", path=str(area / "ro"))
    assert ro.content == str(area / "ro" / "ref.md")
    none = await call(tools, "Grep", pattern="zzz")
    assert none.content == "No matches found"


async def test_grep_errors(area: Path) -> None:
    tools = tools_for(area)
    assert "regular expression" in (await call(tools, "Grep", pattern="(")).content
    assert (await call(tools, "Grep", pattern="x", output_mode="lines")).is_error
    assert (await call(tools, "Grep", pattern="x", path="..")).denied
    assert "does not exist" in (await call(tools, "Grep", pattern="x", path="nope")).content


async def test_grep_results_are_capped(area: Path) -> None:
    (area / "mem" / "many.md").write_text("hit\n" * 50)
    tools = tools_for(area, grep_max_results=5)
    result = await call(tools, "Grep", pattern="hit", output_mode="content")
    lines = result.content.splitlines()
    assert len(lines) == 6 and "results cut at 5" in lines[-1]


async def backtracking_area(area: Path) -> None:
    # One line of 40 "a"s and a "!" makes (a|aa)+$ try ~10^8 ways before failing.
    (area / "mem" / "trap.md").write_text(("a" * 40 + "!\n") * 3)


@pytest.mark.parametrize("mode", ["content", "count", "files_with_matches"])
async def test_a_backtracking_pattern_stops_at_the_budget_and_the_loop_keeps_running(
    area: Path, mode: str
) -> None:
    await backtracking_area(area)
    tools = make_tools(
        MemoryDirPolicy(area / "mem", (area / "ro",)),
        ALL,
        cwd=area / "mem",
        file_limits=FileLimits(search_max_seconds=0.5),
    )
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        result = await call(tools, "Grep", pattern="(a|aa)+$", output_mode=mode)
        tg.cancel_scope.cancel()
    assert "search stopped after 0.5 s" in result.content
    # The match ran with the GIL released: the event loop kept ticking meanwhile.
    assert ticks >= 10


async def test_glob(area: Path) -> None:
    tools = tools_for(area)
    mem = area / "mem"
    os.utime(mem / "a.md", (1, 1))
    deep = await call(tools, "Glob", pattern="**/*.md")
    assert deep.content.splitlines() == [str(mem / "sub" / "b.md"), str(mem / "a.md")]
    top = await call(tools, "Glob", pattern="*.md")
    assert top.content == str(mem / "a.md")
    brace = await call(tools, "Glob", pattern="sub/*.{txt,md}")
    assert sorted(brace.content.splitlines()) == [
        str(mem / "sub" / "b.md"),
        str(mem / "sub" / "c.txt"),
    ]
    absolute = await call(tools, "Glob", pattern=f"{mem}/sub/*.txt")
    assert absolute.content == str(mem / "sub" / "c.txt")
    assert "No files match" in (await call(tools, "Glob", pattern="*.py")).content
    assert (await call(tools, "Glob", pattern="../*")).is_error
    assert (await call(tools, "Glob", pattern="/etc/*")).denied


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("*.md", "a.md", True),
        ("*.md", "sub/a.md", False),
        ("**/*.md", "a.md", True),
        ("**/*.md", "x/y/a.md", True),
        ("sub/**", "sub/x/y", True),
        ("a?.md", "ab.md", True),
        ("a?.md", "a/.md", False),
        ("[ab].md", "b.md", True),
        ("[!ab].md", "b.md", False),
        ("*.{md,txt}", "x.txt", True),
        ("*.{md,txt}", "x.py", False),
        ("a.md", "aXmd", False),
    ],
)
def test_glob_regex(pattern: str, path: str, expected: bool) -> None:
    assert bool(glob_regex(pattern).match(path)) is expected


@given(st.text(alphabet="ab.*?", max_size=6), st.text(alphabet="ab.", max_size=6))
def test_glob_regex_agrees_with_fnmatch_on_names(pattern: str, name: str) -> None:
    assert bool(glob_regex(pattern).match(name)) is fnmatch.fnmatchcase(name, pattern)


def test_split_glob_root() -> None:
    assert split_glob_root("/a/b/**/*.md") == ("/a/b", "**/*.md")
    assert split_glob_root("*.md") == ("", "*.md")
    assert split_glob_root("/a/b.md") == ("/a", "b.md")
    assert split_glob_root("/*.md") == ("/", "*.md")


# ---------------------------------------------------------------------------------------------
# Shell and construction


async def test_shell_runs_and_checks_paths(area: Path) -> None:
    tools = tools_for(area)
    result = await call(tools, "Shell", command="grep -c alpha a.md")
    assert (result.content, result.is_error) == ("2", False)
    denied = await call(tools, "Shell", command="cat ../secret.md")
    assert denied.denied and "hunter2" not in denied.content
    failed = await call(tools, "Shell", command="grep zzz a.md")
    assert failed.is_error and not failed.denied and "[exit code 1]" in failed.content


async def test_read_only_policy_tools(area: Path) -> None:
    tools = policy_tools(ReadOnly((area / "ro",)), cwd=area / "ro")
    assert sorted(tools) == ["Glob", "Grep", "Read", "Shell"]
    assert "reference" in (await call(tools, "Read", file_path="ref.md")).content


def test_make_tools_schemas_and_unknown_names(area: Path) -> None:
    tools = tools_for(area)
    for name, tool in tools.items():
        assert tool.name == name and tool.description
        schema = tool.input_schema
        assert schema["type"] == "object"
        assert set(schema["required"]) <= set(schema["properties"])
    with pytest.raises(ValueError, match="unknown tool"):
        make_tools(MemoryDirPolicy(area), ["Bash"], cwd=area)


def test_definitions_are_plain_json() -> None:
    import json

    tools = make_tools(MemoryDirPolicy(Path("/m")), ALL, cwd=Path("/m"))
    text = json.dumps([t.input_schema for t in tools.values()])
    assert re.search(r"\bfile_path\b", text)


# ---------------------------------------------------------------------------------------------
# Faults: never an exception out of a tool


@settings(max_examples=40, deadline=None)
@given(st.text(st.characters(exclude_categories=()), max_size=12))
@example("a\ud800.md")
@example("sub/../../x")
def test_any_path_or_command_is_a_result_never_a_fault(tmp_path_factory: Any, text: str) -> None:
    """Whatever text the model sends (lone surrogates, NULs, climbing parts), every tool
    answers with a result of its own, not a fault caught by the last-resort wrapper."""
    mem = tmp_path_factory.mktemp("fault") / "mem"
    mem.mkdir()
    tools = make_tools(MemoryDirPolicy(mem, allow_delete=True), ALL, cwd=mem)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("Read", {"file_path": text}),
        ("Write", {"file_path": text, "content": text}),
        ("Edit", {"file_path": text, "old_string": "", "new_string": text}),
        ("Delete", {"file_path": text}),
        ("Grep", {"pattern": "x", "path": text}),
        ("Glob", {"pattern": text or "*"}),
        ("Shell", {"command": f"cat '{text}'"}),
        ("Shell", {"command": f"echo {text!r}"}),
    ]

    async def run() -> None:
        for name, args in calls:
            result = await call(tools, name, **args)
            assert "failed inside memd" not in result.content, (name, args, result)

    anyio.run(run)


async def test_a_fault_inside_a_tool_is_an_error_result(area: Path) -> None:
    async def broken(context: ToolContext, args: Mapping[str, Any]) -> ToolResult:
        raise RuntimeError("a bug")

    tool = FunctionTool("Read", "d", {}, tools_for(area)["Read"].context, broken)  # type: ignore[attr-defined]
    result = await tool.run({})
    assert result.is_error and "Read failed inside memd (RuntimeError)" in result.content
