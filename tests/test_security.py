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
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from memd.agent.permissions import EditOnlyFile, MemoryDirPolicy, Policy
from memd.agent.process import ShellLimits, shell_environment
from memd.agent.tools import Tool, ToolResult, make_tools
from memd.agent.vcs import Repository, git_environment

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
    (M, "Read", {"file_path": "hard_out"}),
    (M, "Read", {"file_path": "link_in"}),
    (M, "Grep", {"pattern": "outside", "path": "hard_out"}),
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
    "cat hard_out",
    "grep outside hard_out",
    "cat link_in",
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
    # options that read or write a named file, or run a program (R-A6 audit)
    "sort -T . note.md",
    "sort --compress-program=sh note.md",
    "sort --files0-from=../secret.txt",
    "sort --random-source=../secret.txt note.md",
    "grep --exclude-from=../secret.txt -r x .",
    "grep --color=always x note.md",
    "du -X ../secret.txt .",
    "du --exclude-from=../secret.txt .",
    "du --files0-from=../secret.txt",
    "diff --from-file=../secret.txt note.md",
    "diff -l note.md sub/deep.md",
    "file -m ../secret.txt note.md",
    "file -f ../secret.txt",
    "file -C -m note.md",
    "file -z note.md",
    "rg --pre sh x .",
    "rg -z x .",
    "rg -L x .",
    "rg --ignore-file ../secret.txt x .",
    "tree -o out.txt",
    "tree --fromfile ../secret.txt",
    "tree -R",
    "ls --color=always",
    "ls --hyperlink",
    "tail --pid=1 note.md",
    "date -f ../secret.txt",
    "date -d 'TZ=\"{root}/etc/shadow\" now'",
    "date --date='tz=\"/etc/localtime\" 1 day ago'",
    "sed -n '1w out.txt' note.md",
    "sed -n '1r ../secret.txt' note.md",
    "sed -n 'e id' note.md",
    "find . -files0-from ../secret.txt",
    "find -files0-from ../secret.txt",
    "find . -fprintf out.txt x",
    "find . -fls out.txt",
    "awk 'BEGIN{system(\"id\")}'",
    "tar -xf x.tar --to-command=id",
    "less note.md",
    "git -C .. log",
    "git --exec-path=. log",
    "git --config-env=core.pager=HOME log",
    "git --git-dir=../.git log",
    "git log --format=%G?",
    "git log --pretty='format:%GS %GK'",
    "git show --show-signature",
    "git log --show-sig",
    "git status --recurse-submodules",
    "git describe --dirty",
    "git cat-file --textconv HEAD:note.md",
    "git log --ext-diff -p",
    "git grep SECRET",
    "git config --list",
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
    # A hard link inside the area is another file's content: never read, searched or copied.
    assert "outside content" not in result.content
    if tool != "Shell":
        assert "hard_out" not in result.content


@pytest.mark.anyio
async def test_a_fifo_never_reaches_a_program(tree: Tree) -> None:
    # The shell runs over a copy of regular files only: a FIFO that would hang `cat` is not
    # there, and naming it is refused (the time limit itself: test_shell).
    started = time.monotonic()
    result = await attack(tree, M, "Shell", {"command": "cat fifo"})
    assert result.denied and "FIFO" in result.content
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


# ---------------------------------------------------------------------------------------------
# Escapes through what programs read (R-A6): VCS metadata, repository config, dotfiles, env
#
# Each attack plants the state an agent would have needed to write (or that an earlier,
# unfixed memd let it write), then runs the program through the Shell tool. Where the attack
# would start a program, that program is a script creating a canary file: the canary must not
# exist afterwards, and a control run without the sandbox proves the attack is real. The whole
# tree (the area and everything around it) is hash-identical afterwards.

OUTSIDE_COMMIT = "OUTSIDE-COMMIT-5d1e"
MAGIC_HIT = "MAGIC-HIT-FROM-HOME"


@dataclass(frozen=True)
class Escape:
    root: Path
    area: Path
    outside: Path
    canary: Path
    evil: Path  # an executable that creates the canary

    def tools(self, *, delete: bool = False) -> dict[str, Tool]:
        return make_tools(
            MemoryDirPolicy(self.area, allow_delete=delete),
            ["Read", "Edit", "Write", "Delete", "Shell"],
            cwd=self.area,
            limits=ShellLimits(timeout_s=5),
        )


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    base = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=m"]
    run_env = env if env is not None else {"PATH": os.environ["PATH"], "HOME": str(cwd)}
    done = subprocess.run(
        [*base, *args], cwd=cwd, env=run_env, capture_output=True, text=True, check=False
    )
    return done.stdout + done.stderr


def _repo(path: Path, message: str, content: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q")
    (path / "note.md").write_text(content)
    _git(path, "add", "note.md")
    _git(path, "commit", "-qm", message)


@pytest.fixture
def escape(tmp_path: Path) -> Iterator[Escape]:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    area, outside = tmp_path / "area", tmp_path / "outside"
    _repo(outside, OUTSIDE_COMMIT, SECRET + "\n")
    area.mkdir()
    (area / "note.md").write_text("hello\n")
    canary, evil = tmp_path / "canary", tmp_path / "bin" / "evil"
    evil.parent.mkdir()
    evil.write_text(f"#!/bin/sh\ntouch {canary}\ncat >/dev/null\necho {SECRET}\n")
    evil.chmod(0o755)
    built = Escape(tmp_path, area, outside, canary, evil)
    yield built
    assert not canary.exists(), "a program the sandbox must never start ran"


async def shell(escape: Escape, command: str) -> ToolResult:
    before = tree_hash(escape.root)
    with anyio.fail_after(20):
        result = await escape.tools()["Shell"].run({"command": command})
    assert tree_hash(escape.root) == before, "the command changed the tree"
    assert SECRET not in result.content and OUTSIDE_COMMIT not in result.content, result
    return result


def _add_config(area: Path, text: str) -> None:
    with (area / ".git" / "config").open("a") as config:
        config.write(text)


GIT_READS = ["git log", "git status", "git ls-files", "git show HEAD", "git diff HEAD"]


@pytest.mark.anyio
@pytest.mark.parametrize("command", GIT_READS)
async def test_gitfile_redirect_is_not_followed(escape: Escape, command: str) -> None:
    (escape.area / ".git").write_text(f"gitdir: {escape.outside / '.git'}\n")
    assert OUTSIDE_COMMIT in _git(escape.area, "log"), "control: plain git follows the gitfile"
    result = await shell(escape, command)
    assert result.denied and "not a directory" in result.content


@pytest.mark.anyio
@pytest.mark.parametrize("command", GIT_READS)
async def test_core_worktree_cannot_point_outside(escape: Escape, command: str) -> None:
    _repo(escape.area, "inside", "hello\n")
    _add_config(escape.area, f"[core]\n\tworktree = {escape.outside}\n")
    result = await shell(escape, command)
    assert result.denied and "core.worktree" in result.content


def test_pinned_work_tree_beats_core_worktree(escape: Escape) -> None:
    _repo(escape.area, "inside", "hello\n")
    _add_config(escape.area, f"[core]\n\tworktree = {escape.outside}\n")
    repo = Repository(str(escape.area / ".git"), str(escape.area))
    env = git_environment(shell_environment(escape.area), repo)
    assert _git(escape.area, "rev-parse", "--show-toplevel", env=env).strip() == str(escape.area)


@pytest.mark.anyio
@pytest.mark.parametrize("what", ["alternates", "http-alternates", "commondir", "objects-link"])
async def test_borrowed_objects_are_refused(escape: Escape, what: str) -> None:
    _repo(escape.area, "inside", "hello\n")
    git_dir, theirs = escape.area / ".git", escape.outside / ".git"
    sha = _git(escape.outside, "rev-parse", "HEAD").strip()
    match what:
        case "alternates":
            (git_dir / "objects" / "info" / "alternates").write_text(f"{theirs / 'objects'}\n")
            assert OUTSIDE_COMMIT in _git(escape.area, "cat-file", "-p", sha), "control"
        case "http-alternates":
            (git_dir / "objects" / "info" / "http-alternates").write_text("http://x/\n")
        case "commondir":
            (git_dir / "commondir").write_text(f"{theirs}\n")
        case "objects-link":
            shutil.rmtree(git_dir / "objects")
            (git_dir / "objects").symlink_to(theirs / "objects")
    for command in (f"git cat-file -p {sha}", f"git log {sha}", "git log"):
        result = await shell(escape, command)
        assert result.denied, result


def _signed_commit(area: Path) -> None:
    """A commit with a gpgsig header, so %G? and --show-signature would run gpg.program."""
    tree = _git(area, "write-tree").strip()
    body = (
        f"tree {tree}\nauthor t <t@t> 1 +0000\ncommitter t <t@t> 1 +0000\n"
        "gpgsig -----BEGIN PGP SIGNATURE-----\n \n AAAA\n -----END PGP SIGNATURE-----\n\nsigned\n"
    )
    path = area / "commit.txt"
    path.write_text(body)
    sha = _git(area, "hash-object", "-t", "commit", "-w", str(path)).strip()
    path.unlink()
    _git(area, "update-ref", "HEAD", sha)


@pytest.mark.anyio
async def test_gpg_program_never_runs(escape: Escape) -> None:
    _repo(escape.area, "inside", "hello\n")
    _signed_commit(escape.area)
    _add_config(escape.area, f"[gpg]\n\tprogram = {escape.evil}\n")
    _git(escape.area, "log", "-1", "--format=%G?")
    assert escape.canary.exists(), "control: plain git runs gpg.program for %G?"
    escape.canary.unlink()
    for command in ("git log --format=%G?", "git show --show-signature", "git log"):
        result = await shell(escape, command)
        assert result.denied, result
    # Even if the config check let it through, the environment overrides gpg.program.
    repo = Repository(str(escape.area / ".git"), str(escape.area))
    env = git_environment(shell_environment(escape.area), repo)
    _git(escape.area, "log", "-1", "--format=%G?", "--show-signature", env=env)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("setting", "command"),
    [
        ("[core]\n\tfsmonitor = {evil}\n", "git status"),
        ("[core]\n\tpager = {evil}\n", "git log"),
        ("[pager]\n\tlog = {evil}\n", "git log"),
        ("[diff]\n\texternal = {evil}\n", "git diff"),
        ('[diff "x"]\n\ttextconv = {evil}\n', "git diff"),
        ('[filter "x"]\n\tclean = {evil}\n', "git status"),
        ("[include]\n\tpath = ../evil.cfg\n", "git status"),
        ("[alias]\n\tst = !{evil}\n", "git status"),
        ("[core]\n\thooksPath = {bin}\n", "git status"),
    ],
)
async def test_repository_config_cannot_run_programs(
    escape: Escape, setting: str, command: str
) -> None:
    _repo(escape.area, "inside", "hello\n")
    (escape.area / ".gitattributes").write_text("* diff=x filter=x\n")
    (escape.area / "note.md").write_text("changed\n")
    _add_config(escape.area, setting.format(evil=escape.evil, bin=escape.evil.parent))
    result = await shell(escape, command)
    assert result.denied and "config sets" in result.content


def test_overrides_stop_fsmonitor_even_past_the_config_check(escape: Escape) -> None:
    _repo(escape.area, "inside", "hello\n")
    _add_config(escape.area, f"[core]\n\tfsmonitor = {escape.evil}\n")
    _git(escape.area, "status")
    assert escape.canary.exists(), "control: plain git runs core.fsmonitor"
    escape.canary.unlink()
    repo = Repository(str(escape.area / ".git"), str(escape.area))
    _git(escape.area, "status", env=git_environment(shell_environment(escape.area), repo))


def _file(cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["file", "note.md"], cwd=cwd, env=env, capture_output=True, text=True)
    return done.stdout


@pytest.mark.anyio
async def test_dotfiles_in_the_area_are_not_read(escape: Escape) -> None:
    _repo(escape.area, "inside", "hello\n")
    hostile = f"[core]\n\tfsmonitor = {escape.evil}\n\tpager = {escape.evil}\n"
    (escape.area / ".gitconfig").write_text(hostile)
    (escape.area / ".config" / "git").mkdir(parents=True)
    (escape.area / ".config" / "git" / "config").write_text(hostile)
    (escape.area / ".magic").write_text(f"0\tstring\thello\t{MAGIC_HIT}\n")
    old_home = {"PATH": os.environ["PATH"], "HOME": str(escape.area)}  # the old sandbox's
    _git(escape.area, "status", env=old_home)
    assert escape.canary.exists(), "control: git runs core.fsmonitor from ~/.gitconfig"
    escape.canary.unlink()
    assert MAGIC_HIT in _file(escape.area, old_home), "control: file reads ~/.magic"
    status = await shell(escape, "git status --porcelain")
    assert not status.is_error, status
    magic = await shell(escape, "file note.md")
    assert not magic.is_error and MAGIC_HIT not in magic.content


@pytest.mark.anyio
async def test_the_daemon_environment_does_not_reach_programs(
    escape: Escape, monkeypatch: pytest.MonkeyPatch
) -> None:
    (escape.area / ".magic").write_text(f"0\tstring\thello\t{MAGIC_HIT}\n")
    monkeypatch.setenv("LD_PRELOAD", str(escape.root / "evil.so"))
    monkeypatch.setenv("MAGIC", str(escape.area / ".magic"))
    monkeypatch.setenv("GREP_OPTIONS", "--files-with-matches")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    assert "ANTHROPIC_API_KEY" not in shell_environment(escape.area)
    echo = await shell(escape, "echo hi")
    assert echo.content == "hi" and not echo.is_error, echo
    magic = await shell(escape, "file note.md")
    assert MAGIC_HIT not in magic.content
    grep = await shell(escape, "grep hello note.md")
    assert grep.content == "hello"


VCS_WRITES: list[tuple[str, dict[str, Any]]] = [
    ("Write", {"file_path": ".git", "content": "gitdir: ../outside/.git\n"}),
    ("Write", {"file_path": ".git/config", "content": "[core]\n\tworktree = /\n"}),
    ("Write", {"file_path": ".git/objects/info/alternates", "content": "/x/objects\n"}),
    ("Write", {"file_path": "sub/.git", "content": "gitdir: /\n"}),
    ("Write", {"file_path": "sub/deeper/.git/HEAD", "content": "x"}),
    ("Write", {"file_path": ".GIT/config", "content": "x"}),
    ("Write", {"file_path": "{area}/.git/config", "content": "x"}),
    ("Write", {"file_path": "x/../.git/config", "content": "x"}),
    ("Write", {"file_path": "gitlink/config", "content": "x"}),
    ("Write", {"file_path": ".gitattributes", "content": "* diff=x\n"}),
    ("Write", {"file_path": ".gitmodules", "content": "x"}),
    ("Write", {"file_path": ".hg/hgrc", "content": "[hooks]\n"}),
    ("Write", {"file_path": ".svn/entries", "content": "x"}),
    ("Write", {"file_path": ".bzr/branch/branch.conf", "content": "x"}),
    ("Write", {"file_path": "_darcs/prefs/defaults", "content": "x"}),
    ("Write", {"file_path": ".jj/repo/config.toml", "content": "x"}),
    ("Write", {"file_path": "CVS/Root", "content": "x"}),
    ("Edit", {"file_path": ".git", "old_string": "", "new_string": "gitdir: /\n"}),
    ("Edit", {"file_path": ".git/HEAD", "old_string": "ref", "new_string": "x"}),
    ("Delete", {"file_path": ".git/HEAD"}),
    ("Delete", {"file_path": "gitlink/HEAD"}),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("tool", "args"), VCS_WRITES)
async def test_vcs_metadata_is_never_written(
    escape: Escape, tool: str, args: dict[str, Any]
) -> None:
    _repo(escape.area, "inside", "hello\n")
    (escape.area / "gitlink").symlink_to(".git")
    filled = {k: v.replace("{area}", str(escape.area)) for k, v in args.items()}
    before = tree_hash(escape.root)
    with anyio.fail_after(20):
        result = await escape.tools(delete=True)[tool].run(filled)
    assert result.denied and "version-control metadata" in result.content, result
    assert tree_hash(escape.root) == before


@pytest.mark.anyio
async def test_arguments_past_the_os_limit_are_a_tool_error(escape: Escape) -> None:
    result = await shell(escape, "echo '" + "a" * 200_000 + "'")
    assert result.is_error and "could not start" in result.content
    assert "too long" in result.content.lower()
