"""Adversarial tool calls against a real tree: every one is denied or contained.

The tree holds an allowed memory dir (write root), a read-only root, a session-notes file, and
sensitive files outside all of them, plus traps inside the allowed dir: symbolic links and a
hard link pointing out, a dangling link out, a FIFO, a big file. Each call must come back
denied (or, for reads that are allowed, contained: nothing from outside leaks, hangs are
killed, output is capped), and the whole tree must be byte-for-byte unchanged afterwards —
checked after every call and once more for the whole suite.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from memd.agent.permissions import EditOnlyFile, MemoryDirPolicy, Policy
from memd.agent.process import ShellLimits
from memd.agent.tools import ToolResult, make_tools

SECRET = "TOP-SECRET-7f3a"
SHADOW = "root:SHADOW-HASH-91c2"
TIMEOUT_S = 0.5
OUTPUT_CAP = 4096


@dataclass(frozen=True)
class Tree:
    root: Path
    mem: Path
    ro: Path
    notes: Path

    def policy(self, kind: str) -> Policy:
        if kind == "notes":
            return EditOnlyFile(self.notes)
        return MemoryDirPolicy(self.mem, (self.ro,))


def build(root: Path) -> Tree:
    mem, ro, notes = root / "allowed", root / "readonly", root / "session" / "summary.md"
    for d in (mem / "sub", ro, notes.parent, root / "etc", root / "other", root / "allowed-evil"):
        d.mkdir(parents=True)
    (root / "secret.txt").write_text(SECRET + "\n")
    (root / "etc" / "shadow").write_text(SHADOW + "\n")
    (root / "other" / "summary.md").write_text("someone else's notes " + SECRET + "\n")
    (root / "other" / "linked.md").write_text("outside content, shared by a hard link\n")
    (root / "allowed-evil" / "x.md").write_text(SECRET + "\n")
    (mem / "MEMORY.md").write_text("- [Note](note.md) — a note\n")
    (mem / "note.md").write_text("---\nname: note\n---\nhello\n")
    (mem / "sub" / "deep.md").write_text("deep\n")
    (mem / "big.txt").write_bytes(b"y" * 200_000)
    (mem / "link_out").symlink_to("../secret.txt")
    (mem / "link_dir_out").symlink_to("../etc")
    (mem / "link_in").symlink_to("note.md")
    (mem / "dangling").symlink_to("../created-through-link.txt")
    (mem / "abs_link").symlink_to(root / "etc" / "shadow")
    os.link(root / "other" / "linked.md", mem / "hard_out")
    os.mkfifo(mem / "fifo")
    (ro / "ref.md").write_text("reference\n")
    notes.write_text("# Current State\n_now_\n")
    return Tree(root, mem, ro, notes)


def tree_hash(root: Path) -> str:
    """Paths, types, modes, link targets and contents of everything under ``root``."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = Path(dirpath) / name
            st = path.lstat()
            digest.update(f"{path.relative_to(root)}\0{st.st_mode}\0".encode())
            if stat.S_ISLNK(st.st_mode):
                digest.update(os.readlink(path).encode())
            elif stat.S_ISREG(st.st_mode):
                digest.update(path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tree]:
    built = build(tmp_path_factory.mktemp("security"))
    before = tree_hash(built.root)
    yield built
    assert tree_hash(built.root) == before, "the suite changed the tree"


async def attack(tree: Tree, policy: str, tool: str, args: dict[str, Any]) -> ToolResult:
    tools = make_tools(
        tree.policy(policy),
        ["Read", "Edit", "Write", "Delete", "Grep", "Glob", "Shell"],
        cwd=tree.mem if policy == "mem" else tree.notes.parent,
        limits=ShellLimits(timeout_s=TIMEOUT_S, max_output_bytes=OUTPUT_CAP),
    )
    before = tree_hash(tree.root)
    with anyio.fail_after(20):
        result = await tools[tool].run(args)
    assert tree_hash(tree.root) == before, "the call changed the tree"
    assert SECRET not in result.content and SHADOW not in result.content
    return result


M, N = "mem", "notes"

PATH_ATTACKS: list[tuple[str, str, dict[str, Any]]] = [
    # traversal and absolute paths
    (M, "Read", {"file_path": "../secret.txt"}),
    (M, "Read", {"file_path": "sub/../../secret.txt"}),
    (M, "Read", {"file_path": "./././../etc/shadow"}),
    (M, "Read", {"file_path": "..//..//..//etc/passwd"}),
    (M, "Read", {"file_path": "/etc/passwd"}),
    (M, "Read", {"file_path": "{root}/secret.txt"}),
    (M, "Read", {"file_path": "{mem}/../secret.txt"}),
    (M, "Read", {"file_path": "{root}/allowed-evil/x.md"}),
    (M, "Read", {"file_path": "{root}/ALLOWED/../secret.txt"}),
    (M, "Read", {"file_path": "~/.bashrc"}),
    # links inside pointing out
    (M, "Read", {"file_path": "link_out"}),
    (M, "Read", {"file_path": "link_dir_out/shadow"}),
    (M, "Read", {"file_path": "abs_link"}),
    (M, "Read", {"file_path": "dangling"}),
    (M, "Write", {"file_path": "link_out", "content": "x"}),
    (M, "Write", {"file_path": "link_dir_out/shadow", "content": "x"}),
    (M, "Write", {"file_path": "link_dir_out/new.txt", "content": "x"}),
    (M, "Write", {"file_path": "dangling", "content": "x"}),
    (M, "Write", {"file_path": "link_in", "content": "x"}),
    (M, "Edit", {"file_path": "link_in", "old_string": "hello", "new_string": "x"}),
    (M, "Edit", {"file_path": "abs_link", "old_string": "root", "new_string": "x"}),
    # hard link inside pointing out
    (M, "Write", {"file_path": "hard_out", "content": "x"}),
    (M, "Edit", {"file_path": "hard_out", "old_string": "outside", "new_string": "x"}),
    # writes outside, into the read-only root, odd names
    (M, "Write", {"file_path": "../secret.txt", "content": "x"}),
    (M, "Write", {"file_path": "../evil.txt", "content": "x"}),
    (M, "Write", {"file_path": "sub/../../evil.txt", "content": "x"}),
    (M, "Write", {"file_path": "/tmp/memd-evil.txt", "content": "x"}),
    (M, "Write", {"file_path": "{root}/allowed-evil/y.md", "content": "x"}),
    (M, "Write", {"file_path": "{ro}/ref.md", "content": "x"}),
    (M, "Write", {"file_path": "{ro}/new.md", "content": "x"}),
    (M, "Write", {"file_path": "", "content": "x"}),
    (M, "Write", {"file_path": "sub\0/x.md", "content": "x"}),
    (M, "Write", {"file_path": ".", "content": "x"}),
    (M, "Write", {"file_path": "fifo", "content": "x"}),
    (M, "Edit", {"file_path": "../other/summary.md", "old_string": "notes", "new_string": "x"}),
    (M, "Delete", {"file_path": "note.md"}),
    (M, "Delete", {"file_path": "../secret.txt"}),
    # the session-notes policy: only Edit on exactly its file
    (N, "Edit", {"file_path": "{root}/other/summary.md", "old_string": "notes", "new_string": "x"}),
    (N, "Edit", {"file_path": "../other/summary.md", "old_string": "notes", "new_string": "x"}),
    (N, "Edit", {"file_path": "summary.md.bak", "old_string": "", "new_string": "x"}),
    (N, "Edit", {"file_path": "SUMMARY.md", "old_string": "", "new_string": "x"}),
    (N, "Write", {"file_path": "summary.md", "content": "x"}),
    (N, "Read", {"file_path": "{root}/secret.txt"}),
    (N, "Read", {"file_path": "summary.md"}),
    (N, "Grep", {"pattern": "SECRET", "path": "{root}"}),
    (N, "Shell", {"command": "cat summary.md"}),
    # search tools aimed outside
    (M, "Grep", {"pattern": "SECRET", "path": ".."}),
    (M, "Grep", {"pattern": "SHADOW", "path": "{root}/etc"}),
    (M, "Grep", {"pattern": "SECRET", "path": "link_out"}),
    (M, "Glob", {"pattern": "*", "path": ".."}),
    (M, "Glob", {"pattern": "../*"}),
    (M, "Glob", {"pattern": "{root}/etc/*"}),
]

SHELL_ATTACKS = [
    "cat ../secret.txt",
    "cat {root}/secret.txt",
    "cat /etc/passwd",
    "cat link_out",
    "cat link_dir_out/shadow",
    "head -n 1 abs_link",
    "stat ../secret.txt",
    "grep -r SECRET ..",
    "grep -f ../secret.txt note.md",
    "find .. -name secret.txt",
    "find link_dir_out",
    "ls {root}/etc",
    "wc -c note.md ../secret.txt",
    "cat note.md | cat ../secret.txt",
    "diff note.md ../secret.txt",
    "git diff ../secret.txt note.md",
    "ls > out.txt",
    "ls >> note.md",
    "cat < ../secret.txt",
    "ls 2> err.txt",
    "ls &> out.txt",
    "cat <<EOF",
    "echo $(cat ../secret.txt)",
    "echo `cat ../secret.txt`",
    'echo "$(id)"',
    "cat <(cat ../secret.txt)",
    "ls; rm note.md",
    "ls && rm note.md",
    "ls || rm note.md",
    "ls & rm note.md",
    "ls\nrm note.md",
    "echo $HOME",
    "echo ${HOME}",
    'cat "$HOME/.bashrc"',
    "cat *",
    "cat ../*",
    "cat ~/.bashrc",
    "rm note.md",
    "tee note.md",
    "dd if=../secret.txt of=copy.txt",
    "cp ../secret.txt .",
    "/bin/cat ../secret.txt",
    "env cat ../secret.txt",
    "bash -c 'cat ../secret.txt'",
    "ls | sh",
    "xargs cat",
    "awk '{print}' note.md",
    "find . -delete",
    "find . -exec cat '{}' +",
    "find . -fprint out.txt",
    "find -L . -name shadow",
    "sed -i s/hello/x/ note.md",
    "sed --in-place s/hello/x/ note.md",
    "sed -n 'w out.txt' note.md",
    "sed -n '1e id' note.md",
    "sort -o note.md note.md",
    "sort --out=note.md note.md",
    "uniq note.md out.txt",
    "grep -R SECRET .",
    "git -c core.pager=id log",
    "git diff --output=out.txt",
    "git diff --no-index ../secret.txt note.md",
    "date -s 2001-01-01",
    "date 010100002001",
    "tail -f note.md",
]


def fill(value: Any, tree: Tree) -> Any:
    if isinstance(value, str):
        return (
            value.replace("{root}", str(tree.root))
            .replace("{mem}", str(tree.mem))
            .replace("{ro}", str(tree.ro))
        )
    return value


@pytest.mark.anyio
@pytest.mark.parametrize(("policy", "tool", "args"), PATH_ATTACKS)
async def test_path_attack_is_denied(
    tree: Tree, policy: str, tool: str, args: dict[str, Any]
) -> None:
    result = await attack(tree, policy, tool, {k: fill(v, tree) for k, v in args.items()})
    assert result.is_error and result.denied, result
    assert result.content.startswith("denied:")
    assert result.touched == ()


@pytest.mark.anyio
@pytest.mark.parametrize("command", SHELL_ATTACKS)
async def test_shell_attack_is_denied(tree: Tree, command: str) -> None:
    result = await attack(tree, M, "Shell", {"command": fill(command, tree)})
    assert result.is_error and result.denied, result
    assert result.content.startswith("denied:")


@pytest.mark.anyio
async def test_writes_through_links_leave_no_trace(tree: Tree) -> None:
    await attack(tree, M, "Write", {"file_path": "dangling", "content": "x"})
    assert not (tree.root / "created-through-link.txt").exists()
    assert not (tree.root / "etc" / "new.txt").exists()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("Grep", {"pattern": "SECRET|SHADOW|outside"}),
        ("Grep", {"pattern": ".", "output_mode": "content", "glob": "*"}),
        ("Glob", {"pattern": "**/*"}),
        ("Shell", {"command": "grep -r SECRET ."}),
        ("Shell", {"command": "find . -name shadow"}),
        ("Shell", {"command": "ls -R"}),
    ],
)
async def test_searches_inside_do_not_follow_links_out(
    tree: Tree, tool: str, args: dict[str, Any]
) -> None:
    result = await attack(tree, M, tool, args)
    assert "shadow" not in result.content.replace("link_dir_out", "")
    # The hard link is inside the area: reading it is allowed, writing it is not.
    if tool == "Grep" and "outside" in args.get("pattern", ""):
        assert "hard_out" in result.content


@pytest.mark.anyio
async def test_hanging_command_is_killed_within_its_limit(tree: Tree) -> None:
    started = time.monotonic()
    result = await attack(tree, M, "Shell", {"command": "cat fifo"})
    assert result.is_error and "killed" in result.content
    assert time.monotonic() - started < TIMEOUT_S + 5


@pytest.mark.anyio
async def test_fifo_does_not_hang_the_file_tools(tree: Tree) -> None:
    read = await attack(tree, M, "Read", {"file_path": "fifo"})
    assert read.is_error and "not a regular file" in read.content
    grep = await attack(tree, M, "Grep", {"pattern": "x", "path": "."})
    assert not grep.is_error


@pytest.mark.anyio
async def test_huge_output_is_capped(tree: Tree) -> None:
    result = await attack(tree, M, "Shell", {"command": "cat big.txt"})
    assert result.content.split("\n")[0] == "y" * OUTPUT_CAP
    assert f"output cut at {OUTPUT_CAP} bytes" in result.content


@pytest.mark.anyio
async def test_denials_say_what_is_allowed(tree: Tree) -> None:
    mem = await attack(tree, M, "Write", {"file_path": "../evil.txt", "content": "x"})
    assert f"only inside {tree.mem}" in mem.content
    notes = await attack(tree, N, "Read", {"file_path": "summary.md"})
    assert f"only use the Edit tool on {tree.notes}" in notes.content


def test_suite_is_large_enough() -> None:
    assert len(PATH_ATTACKS) + len(SHELL_ATTACKS) >= 60
