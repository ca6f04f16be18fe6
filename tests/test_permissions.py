"""Permission policies: the pure decisions, path resolution, and the composed checks."""

from __future__ import annotations

import os
import posixpath
import pwd
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memd.agent.permissions import (
    Allow,
    Deny,
    EditOnlyFile,
    MemoryDirPolicy,
    Policy,
    ReadOnly,
    Target,
    allowed_tools,
    check,
    check_shell,
    decide,
    resolve_policy,
    resolve_target,
    within,
)
from memd.agent.shell import Pipeline
from tests.conftest import PROFILE_SUPPRESSED

MEM = MemoryDirPolicy(Path("/home/u/mem"), (Path("/home/u/transcripts"),))
NOTES = EditOnlyFile(Path("/home/u/s/summary.md"))
RO = ReadOnly((Path("/home/u/ro"),))


def file(path: str, *, nlink: int = 1, link: bool = False) -> Target:
    return Target(path, "file", nlink, link)


def missing(path: str) -> Target:
    return Target(path, "missing", 0)


# ---------------------------------------------------------------------------------------------
# within


@pytest.mark.parametrize(
    ("path", "root", "expected"),
    [
        ("/a/b", "/a/b", True),
        ("/a/b/c", "/a/b", True),
        ("/a/bc", "/a/b", False),
        ("/a/b-evil/x", "/a/b", False),
        ("/a", "/a/b", False),
        ("/x", "/", True),
        ("/a/b/c", "/a/b/", True),
    ],
)
def test_within(path: str, root: str, expected: bool) -> None:
    assert within(path, root) is expected


def test_within_casefold_only_when_asked() -> None:
    assert not within("/Home/U/Mem/x", "/home/u/mem")
    assert within("/Home/U/Mem/x", "/home/u/mem", casefold=True)
    assert not within("/Home/U/Memx", "/home/u/mem", casefold=True)


names = st.sampled_from(["a", "b", "ab", "a.b", "B", "-", "x y"])
abs_paths = st.lists(names, max_size=5).map(lambda parts: "/" + "/".join(parts))


@given(abs_paths, abs_paths)
def test_within_agrees_with_purepath(path: str, root: str) -> None:
    assert within(path, root) is PurePosixPath(path).is_relative_to(root)


# ---------------------------------------------------------------------------------------------
# Pure decisions


@pytest.mark.parametrize(
    ("tool", "target", "allowed"),
    [
        ("Read", file("/home/u/mem/a.md"), True),
        ("Read", file("/home/u/transcripts/x.jsonl"), True),
        ("Read", file("/home/u/secret"), False),
        ("Read", file("/home/u/mem-evil/a.md"), False),
        ("Grep", Target("/home/u/mem", "dir"), True),
        ("Glob", Target("/home/u", "dir"), False),
        ("Edit", file("/home/u/mem/a.md"), True),
        ("Write", missing("/home/u/mem/new/b.md"), True),
        ("Write", missing("/home/u/transcripts/b.md"), False),
        ("Write", missing("/home/u/b.md"), False),
        ("Write", Target("/home/u/mem", "dir"), False),
        ("Write", Target("/home/u/mem/sub", "dir"), False),
        ("Write", Target("/home/u/mem/fifo", "other"), False),
        ("Edit", file("/home/u/mem/a.md", nlink=2), False),
        ("Edit", file("/home/u/mem/a.md", link=True), False),
        ("Delete", file("/home/u/mem/a.md"), False),
        ("Shell", None, True),
        ("Bash", None, False),
        ("Read", None, False),
    ],
)
def test_memory_dir_policy(tool: str, target: Target | None, allowed: bool) -> None:
    assert isinstance(decide(MEM, tool, target), Allow) is allowed


def test_memory_dir_delete_only_when_allowed() -> None:
    policy = MemoryDirPolicy(Path("/m"), allow_delete=True)
    assert decide(policy, "Delete", file("/m/a.md")) == Allow()
    assert isinstance(decide(policy, "Delete", file("/m/a.md", link=True)), Deny)
    assert isinstance(decide(policy, "Delete", Target("/m/d", "dir")), Deny)
    assert isinstance(decide(policy, "Delete", file("/other/a.md")), Deny)
    assert isinstance(decide(policy, "Delete", Target("/m", "dir")), Deny)
    assert "Delete" in allowed_tools(policy)
    assert "Delete" not in allowed_tools(MEM)


@pytest.mark.parametrize(
    ("tool", "target", "allowed"),
    [
        ("Edit", file("/home/u/s/summary.md"), True),
        ("Edit", missing("/home/u/s/summary.md"), True),
        ("Edit", file("/home/u/s/summary.md.bak"), False),
        ("Edit", file("/home/u/other/summary.md"), False),
        ("Edit", file("/home/u/s/Summary.md"), False),
        ("Edit", file("/home/u/s/summary.md/x"), False),
        ("Edit", file("/home/u/s/summary.md", link=True), False),
        ("Edit", file("/home/u/s/summary.md", nlink=3), False),
        ("Write", file("/home/u/s/summary.md"), False),
        ("Read", file("/home/u/s/summary.md"), False),
        ("Shell", None, False),
    ],
)
def test_edit_only_file(tool: str, target: Target | None, allowed: bool) -> None:
    assert isinstance(decide(NOTES, tool, target), Allow) is allowed


def test_edit_only_file_casefold() -> None:
    policy = EditOnlyFile(Path("/home/u/s/summary.md"), casefold=True)
    assert decide(policy, "Edit", file("/HOME/u/S/Summary.MD")) == Allow()
    assert isinstance(decide(policy, "Edit", file("/home/u/s/summary.mdx")), Deny)


def test_read_only_policy_never_writes() -> None:
    assert decide(RO, "Read", file("/home/u/ro/a")) == Allow()
    assert decide(RO, "Shell", None) == Allow()
    for tool in ("Edit", "Write", "Delete"):
        assert isinstance(decide(RO, tool, file("/home/u/ro/a")), Deny)


@pytest.mark.parametrize(
    ("policy", "tool", "target", "must_mention"),
    [
        (NOTES, "Read", file("/etc/passwd"), "only use the Edit tool on /home/u/s/summary.md"),
        (NOTES, "Edit", file("/x/summary.md"), "/home/u/s/summary.md"),
        (MEM, "Write", missing("/etc/x"), "only inside /home/u/mem"),
        (MEM, "Read", file("/etc/passwd"), "/home/u/transcripts"),
        (MEM, "Edit", file("/home/u/mem/a", nlink=2), "hard links"),
        (MEM, "Edit", file("/home/u/mem/a", link=True), "symbolic link"),
        (RO, "Write", missing("/home/u/ro/x"), "only read"),
    ],
)
def test_denial_says_what_is_allowed(
    policy: Policy, tool: str, target: Target, must_mention: str
) -> None:
    decision = decide(policy, tool, target)
    assert isinstance(decision, Deny)
    assert decision.reason.startswith("denied:")
    assert must_mention in decision.reason


segments = st.sampled_from(["..", ".", "", "mem", "a", "b", "home", "u", "mem-x"])


@given(st.lists(segments, max_size=10), st.booleans())
def test_lexical_paths_outside_never_allowed(parts: list[str], absolute: bool) -> None:
    raw = ("/" if absolute else "") + "/".join(parts)
    joined = posixpath.normpath(posixpath.join("/home/u/mem", raw))
    decision = decide(MEM, "Write", missing(joined))
    if isinstance(decision, Allow):
        assert joined.startswith("/home/u/mem/")


# ---------------------------------------------------------------------------------------------
# Resolution against a real tree


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "mem" / "sub").mkdir(parents=True)
    (tmp_path / "ro").mkdir()
    (tmp_path / "out").mkdir()
    (tmp_path / "secret").write_text("s")
    (tmp_path / "out" / "x.md").write_text("x")
    (tmp_path / "mem" / "a.md").write_text("a")
    (tmp_path / "mem" / "link_out").symlink_to(tmp_path / "secret")
    (tmp_path / "mem" / "dir_out").symlink_to(tmp_path / "out")
    (tmp_path / "mem" / "link_in").symlink_to("a.md")
    (tmp_path / "mem" / "sub" / "up").symlink_to("..")
    (tmp_path / "mem" / "loop").symlink_to("loop")
    os.link(tmp_path / "out" / "x.md", tmp_path / "mem" / "hard.md")
    return tmp_path


def policy_for(tree: Path) -> MemoryDirPolicy:
    return MemoryDirPolicy(tree / "mem", (tree / "ro",))


def test_relative_paths_are_relative_to_the_policy_not_the_process(
    tree: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tree / "out")
    policy = policy_for(tree)
    assert check(policy, "Read", {"file_path": "a.md"}) == Allow()
    assert check(policy, "Read", {"file_path": "x.md"}) == Allow()  # mem/x.md, missing
    assert isinstance(check(policy, "Read", {"file_path": "../out/x.md"}), Deny)


@pytest.mark.parametrize(
    "raw",
    [
        "../secret",
        "sub/../../secret",
        "link_out",
        "dir_out/x.md",
        "dir_out/new.md",
        "sub/up/../secret",
        "./././../out/x.md",
        "..//..//etc/passwd",
    ],
)
def test_paths_resolving_outside_are_denied(tree: Path, raw: str) -> None:
    policy = policy_for(tree)
    assert isinstance(check(policy, "Read", {"file_path": raw}), Deny)
    assert isinstance(check(policy, "Write", {"file_path": raw}), Deny)


def test_links_that_stay_inside(tree: Path) -> None:
    policy = policy_for(tree)
    assert check(policy, "Read", {"file_path": "link_in"}) == Allow()
    assert check(policy, "Read", {"file_path": "sub/up/a.md"}) == Allow()
    # Writing through a link is refused even when it points inside.
    decision = check(policy, "Edit", {"file_path": "link_in"})
    assert isinstance(decision, Deny)
    assert "symbolic link" in decision.reason
    assert check(policy, "Edit", {"file_path": "sub/up/a.md"}) == Allow()


def test_hard_link_write_denied_read_allowed(tree: Path) -> None:
    policy = policy_for(tree)
    assert check(policy, "Read", {"file_path": "hard.md"}) == Allow()
    decision = check(policy, "Write", {"file_path": "hard.md"})
    assert isinstance(decision, Deny)
    assert "hard links" in decision.reason


def test_resolve_target_kinds(tree: Path) -> None:
    base = tree / "mem"
    assert resolve_target("a.md", base=base) == Target(str(base / "a.md"), "file", 1, False)
    sub = resolve_target("sub", base=base)
    assert isinstance(sub, Target)
    assert (sub.path, sub.kind, sub.link) == (str(base / "sub"), "dir", False)
    new = resolve_target("new/deeper/c.md", base=base)
    assert new == Target(str(base / "new/deeper/c.md"), "missing", 0, False)
    link = resolve_target("link_out", base=base)
    assert isinstance(link, Target)
    assert (link.path, link.link) == (str(tree / "secret"), True)
    loop = resolve_target("loop", base=base)
    assert isinstance(loop, Target)
    assert loop.kind == "other"
    assert isinstance(check(policy_for(tree), "Write", {"file_path": "loop"}), Deny)
    assert isinstance(resolve_target("", base=base), Deny)
    assert isinstance(resolve_target("a\0b", base=base), Deny)


def test_home_is_expanded(tree: Path) -> None:
    target = resolve_target("~/x", base=tree)
    assert isinstance(target, Target)
    home = pwd.getpwuid(os.getuid()).pw_dir
    assert target.path == os.path.join(os.path.realpath(home), "x")
    literal = resolve_target("~x", base=tree / "mem")
    assert isinstance(literal, Target)
    assert literal.path == str(tree / "mem" / "~x")


def test_policy_roots_given_through_links(tree: Path) -> None:
    (tree / "alias").symlink_to(tree / "mem")
    policy = MemoryDirPolicy(tree / "alias")
    assert check(policy, "Write", {"file_path": str(tree / "mem" / "b.md")}) == Allow()
    assert check(policy, "Write", {"file_path": "b.md"}) == Allow()


def test_edit_only_file_that_is_a_link_out_is_never_written(tree: Path) -> None:
    (tree / "notes").mkdir()
    (tree / "notes" / "summary.md").symlink_to(tree / "secret")
    policy = EditOnlyFile(tree / "notes" / "summary.md")
    for raw in (str(tree / "notes" / "summary.md"), str(tree / "secret"), "summary.md"):
        assert isinstance(check(policy, "Edit", {"file_path": raw}), Deny)


def test_edit_only_file_resolution(tree: Path) -> None:
    (tree / "notes").mkdir()
    (tree / "notes" / "summary.md").write_text("n")
    (tree / "out" / "summary.md").write_text("o")
    policy = EditOnlyFile(tree / "notes" / "summary.md")
    assert check(policy, "Edit", {"file_path": "summary.md"}) == Allow()
    assert check(policy, "Edit", {"file_path": "../notes/./summary.md"}) == Allow()
    assert isinstance(check(policy, "Edit", {"file_path": "../out/summary.md"}), Deny)
    assert isinstance(check(policy, "Edit", {"file_path": "SUMMARY.md"}), Deny)


def test_case_sensitivity_is_detected(tree: Path) -> None:
    resolved = resolve_policy(policy_for(tree))
    upper = (tree / "mem").with_name("MEM")
    assert resolved.casefold is (upper.exists() and upper.samefile(tree / "mem"))


def test_check_validates_arguments(tree: Path) -> None:
    policy = policy_for(tree)
    assert isinstance(check(policy, "Read", {}), Deny)
    assert isinstance(check(policy, "Read", {"file_path": 3}), Deny)
    assert check(policy, "Grep", {"pattern": "x"}) == Allow()  # path defaults to the root
    assert isinstance(check(policy, "Shell", {}), Deny)
    assert isinstance(check(policy, "Frobnicate", {}), Deny)
    assert policy.check("Read", {"file_path": "a.md"}) == Allow()


def test_check_shell_checks_every_path(tree: Path) -> None:
    policy = policy_for(tree)
    mem = tree / "mem"
    assert isinstance(check_shell(policy, "cat a.md | wc -l", cwd=mem), Pipeline)
    assert isinstance(check_shell(policy, f"ls {tree / 'ro'}", cwd=mem), Pipeline)
    for command in (
        "cat ../secret",
        "cat link_out",
        "wc -l a.md ../secret",
        "grep -r x ..",
        "find dir_out",
        "grep -f ../secret a.md",
        "cat a.md | grep x ../secret",
        "diff sub ../ro",
    ):
        assert isinstance(check_shell(policy, command, cwd=mem), Deny), command
    # Implicit reads of the working directory are checked too.
    assert isinstance(check_shell(policy, "ls", cwd=tree / "out"), Deny)
    assert isinstance(check_shell(NOTES, "ls", cwd=mem), Deny)


def reference_resolve(path: str) -> str:
    """An independent resolver: walk components, expanding links as the kernel does."""
    pending = path.split("/")
    resolved = "/"
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            resolved = posixpath.dirname(resolved)
            continue
        candidate = posixpath.join(resolved, part)
        if os.path.islink(candidate) and hops < 40:
            hops += 1
            link = os.readlink(candidate)
            resolved = "/" if link.startswith("/") else resolved
            pending = link.split("/") + pending
        else:
            resolved = candidate
    return resolved


def iter_parts() -> Iterator[str]:
    yield from ["..", ".", "", "a.md", "sub", "up", "link_out", "dir_out", "link_in", "mem"]


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[*PROFILE_SUPPRESSED, HealthCheck.function_scoped_fixture],
)
@given(parts=st.lists(st.sampled_from(list(iter_parts())), max_size=8), absolute=st.booleans())
def test_real_paths_resolving_outside_never_allowed(
    tree: Path, parts: list[str], absolute: bool
) -> None:
    policy = policy_for(tree)
    mem = os.path.realpath(tree / "mem")
    raw = "/".join(parts)
    if absolute:
        raw = mem + "/" + raw
    if not raw:
        return
    truth = reference_resolve(posixpath.join(mem, raw))
    for tool in ("Read", "Write"):
        if isinstance(check(policy, tool, {"file_path": raw}), Allow):
            assert within(truth, mem), (tool, raw, truth)
    if isinstance(check(policy, "Write", {"file_path": raw}), Allow):
        assert truth != mem
