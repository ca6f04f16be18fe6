"""Other tools' files read as hostile (issue 33, item 1): git's pointers, the agents' settings,
configs and project maps go through one door (:mod:`memd_client.foreign_file`), and a bad one
is a line in ``status`` and ``doctor``, never an exception, a hang or a huge read."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd.foreign_reads import PROBLEMS
from memd.memory.claude_code import read_settings
from memd.memory.paths import find_git_root, project_slug
from memd.session.template import DEFAULT_TEMPLATE, load_template
from memd.sources.codex import own_memory
from memd.sources.gemini import Gemini
from memd_client import foreign_file
from memd_client.foreign_file import Unusable
from tests.conftest import PROFILE_SUPPRESSED
from tests.daemon_harness import (
    call,
    claude_hook,
    fake_home,
    memdctl,
    read_log,
    start_memd,
    stop_memd,
)
from tests.fifo_support import waited_on_fifos
from tests.uid_support import IS_ROOT, NOBODY, run_forked

BIG = 512 * 1024 * 1024


def worktree(tmp_path: Path) -> tuple[Path, Path]:
    """A linked worktree's pointers as git writes them: (the worktree, its gitdir)."""
    main, tree = tmp_path / "main", tmp_path / "tree"
    gitdir = main / ".git" / "worktrees" / "tree"
    gitdir.mkdir(parents=True)
    tree.mkdir()
    (tree / ".git").write_bytes(b"gitdir: " + os.fsencode(gitdir) + b"\n")
    (gitdir / "gitdir").write_bytes(os.fsencode(tree / ".git") + b"\n")
    (gitdir / "commondir").write_bytes(b"../..\n")
    return tree, gitdir


def read_cost(target: str) -> dict[str, Any]:
    """Find the git root of ``target`` in a fresh interpreter: what it read (``rchar``, from
    ``/proc/self/io``, the imports' reads taken out) and its peak RSS growth in KiB."""
    code = (
        "import json, resource, sys\n"
        "from pathlib import Path\n"
        "from memd.memory.paths import find_git_root\n"
        "def rchar():\n"
        "    with open('/proc/self/io') as f:\n"
        "        return int(f.read().split('rchar: ')[1].split()[0])\n"
        "rss, before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, rchar()\n"
        "root = find_git_root(Path(sys.argv[1]))\n"
        "read = rchar() - before\n"
        "grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss\n"
        "print(json.dumps({'root': str(root), 'read': read, 'grew_kib': grew}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, target], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# ---------------------------------------------------------------------------------------------
# git's pointers


def test_a_huge_sparse_dotgit_file_above_the_cwd_is_not_read_whole(tmp_path: Path) -> None:
    """Issue 33: a 512 MiB sparse ``.git`` file above a hook's cwd was read whole (+1 to
    +2 GB RSS, 2-3 s). Now at most the cap is read, and the folder is its own project."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    with open(tmp_path / "a" / ".git", "wb") as f:
        f.truncate(BIG)
    cost = read_cost(str(tmp_path / "a" / "b"))
    assert cost["root"] == str(tmp_path / "a")
    assert cost["read"] < 1024 * 1024, cost
    assert cost["grew_kib"] < 64 * 1024, cost


def test_a_huge_commondir_is_not_read_whole(tmp_path: Path) -> None:
    """Issue 33: a 512 MiB ``commondir`` took 13 s and 3.6 GB."""
    tree, gitdir = worktree(tmp_path)
    assert find_git_root(tree) == tmp_path / "main"  # the well-formed worktree first
    with open(gitdir / "commondir", "wb") as f:
        f.truncate(BIG)
    cost = read_cost(str(tree))
    assert cost["root"] == str(tree)  # the pointer is not used: the folder is its own root
    assert cost["read"] < 1024 * 1024, cost
    assert cost["grew_kib"] < 64 * 1024, cost


@pytest.mark.parametrize("name", ["commondir", "gitdir", ".git"])
def test_a_nul_in_a_git_pointer_is_a_problem_named_in_status_not_an_exception(
    tmp_path: Path, name: str
) -> None:
    tree, gitdir = worktree(tmp_path)
    pointer = tree / ".git" if name == ".git" else gitdir / name
    pointer.write_bytes(pointer.read_bytes().replace(b"/", b"/\x00", 1))
    assert find_git_root(tree) == tree
    row = next(r for r in PROBLEMS.as_rows() if r["path"] == str(pointer))
    assert str(row["problem"]).startswith("holds a NUL byte")
    assert "git worktree repair" in str(row["fix"])
    pointer.write_bytes(pointer.read_bytes().replace(b"\x00", b""))  # repaired
    assert find_git_root(tree) == tmp_path / "main"
    assert all(r["path"] != str(pointer) for r in PROBLEMS.as_rows())


def test_git_pointers_are_not_read_through_links_or_from_special_files(tmp_path: Path) -> None:
    tree, gitdir = worktree(tmp_path)
    outside = tmp_path / "outside"
    outside.write_bytes((gitdir / "commondir").read_bytes())
    (gitdir / "commondir").unlink()
    (gitdir / "commondir").symlink_to(outside)
    assert find_git_root(tree) == tree
    (gitdir / "commondir").unlink()
    os.mkfifo(gitdir / "commondir")
    seen: list[Path | None] = []
    assert not waited_on_fifos(lambda: seen.append(find_git_root(tree)), [gitdir / "commondir"])
    assert seen == [tree]
    problem = next(r for r in PROBLEMS.as_rows() if r["path"] == str(gitdir / "commondir"))
    assert problem["problem"] == "is a FIFO, not a regular file"


def test_a_worktree_whose_pointers_are_not_utf8_keeps_its_bytes(tmp_path: Path) -> None:
    """A name is bytes: a main checkout in a folder whose name is not UTF-8 is found through
    its worktree's pointers, and its memory dir named (one ``-`` per such byte)."""
    raw = os.fsencode(tmp_path) + b"/caf\xe9"
    os.mkdir(raw)
    tree, _ = worktree(Path(os.fsdecode(raw)))
    root = find_git_root(tree)
    assert root is not None and os.fsencode(root) == raw + b"/main"
    assert project_slug(str(root)).endswith("-caf--main")


def test_memdctl_memories_and_the_hook_with_hostile_git_pointers(tmp_path: Path) -> None:
    """Issue 33: NUL in ``commondir`` made ``memdctl memories <dir>`` exit 1 ("embedded null
    byte") and the hook fail open with a traceback; a 512 MiB ``.git`` above the hook's cwd
    grew the daemon by 1-2 GB. Now both answer, the daemon stays small, and ``status`` and
    ``doctor`` name each file with its fix."""
    tree, gitdir = worktree(tmp_path / "work")
    (gitdir / "commondir").write_bytes(b"../..\x00/x\n")
    sparse = tmp_path / "work" / "big"
    (sparse / "below").mkdir(parents=True)
    with open(sparse / ".git", "wb") as f:
        f.truncate(BIG)
    (tmp_path / "home").mkdir()
    with fake_home(tmp_path / "home") as home:
        proc = start_memd(home)
        try:
            hwm = _peak_kib(proc.pid)
            listed = memdctl(home, "memories", str(tree))
            assert listed.returncode == 0, listed.stderr
            hook = claude_hook(home, sparse / "below", "UserPromptSubmit", prompt="hello")
            assert hook.returncode == 0 and b"Traceback" not in hook.stderr, hook.stderr
            status = call(home, "status")["foreign_files"]
            paths = {row["path"]: row for row in status["entries"]}
            assert paths[str(gitdir / "commondir")]["problem"].startswith("holds a NUL byte")
            assert paths[str(sparse / ".git")]["problem"].startswith("is larger than")
            assert _peak_kib(proc.pid) - hwm < 256 * 1024
            text = memdctl(home, "status").stdout
            assert f"{gitdir / 'commondir'} holds a NUL byte" in text
            doctor = memdctl(home, "doctor").stdout
            assert "other tools' files" in doctor and "more (`memdctl status`" in doctor
        finally:
            assert stop_memd(proc) == 0, read_log(home)
        assert "Traceback" not in read_log(home)


def _peak_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1])


# ---------------------------------------------------------------------------------------------
# The agents' settings and configs


def test_claude_settings_through_a_dotfiles_link_are_read(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles" / "claude-settings.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text('{"autoMemoryEnabled": false}')
    (tmp_path / "settings.json").symlink_to(dotfiles)
    assert read_settings(str(tmp_path), None).auto_memory is False


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"[" * 100_000 + b"]" * 100_000, "nests deeper than 64 levels"),
        (b'{"a": 1}\x00', "is not valid JSON"),
        (b'{"a": "\xff"}', "is not UTF-8 text (byte 0xff at offset 7)"),
        (b'{"autoMemoryEnabled": NaN}', "is not valid JSON (NaN is not JSON)"),
        (b'{"x": 1e400}', "past a float's range"),
        (b'{"x": ' + b"9" * 5000 + b"}", "is not valid JSON"),
    ],
)
def test_hostile_claude_settings_are_named_with_what_is_wrong(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    (tmp_path / "settings.json").write_bytes(content)
    settings_read = read_settings(str(tmp_path), None)
    assert settings_read.auto_memory is None
    assert any(problem in p for p in settings_read.problems), settings_read.problems


def test_a_codex_config_with_a_huge_dotted_key_is_refused_before_tomllib(tmp_path: Path) -> None:
    """tomllib is quadratic in a dotted key's parts (10,000 parts: 2 s and 400 MB; the 1 MiB
    config memd reads holds ~500,000): judged on the text first. In a child with 1 GiB of
    address space beyond what it holds when forked (a pytest process deep in the whole suite
    holds most of a GiB already), where the decoder would fail (or the machine swap)."""
    home = tmp_path / ".codex"
    home.mkdir()
    (home / "config.toml").write_text("a" + ".a" * 200_000 + " = 1\n[features]\nmemories = true\n")

    def child() -> int:
        held = next(x for x in Path("/proc/self/status").read_text().splitlines() if "VmSize" in x)
        room = int(held.split()[1]) * 1024 + (1 << 30)
        resource.setrlimit(resource.RLIMIT_AS, (room, room))
        return 0 if own_memory(home) is None else 1

    exited = run_forked(child, timeout=60)
    assert exited.code == 0, exited.stderr
    found = foreign_file.read_toml(home / "config.toml", 1 << 20, links="follow")
    assert isinstance(found, Unusable) and "dotted key of more than 64 parts" in found.problem


def test_codex_config_through_a_dotfiles_link_is_read(tmp_path: Path) -> None:
    home = tmp_path / ".codex"
    home.mkdir()
    (tmp_path / "config.toml").write_text("[features]\nmemories = true\n")
    (home / "config.toml").symlink_to(tmp_path / "config.toml")
    assert own_memory(home) is not None


def test_gemini_project_files_are_not_read_through_links(tmp_path: Path) -> None:
    gemini = Gemini(tmp_path / ".gemini")
    folder = tmp_path / ".gemini" / "tmp" / "proj"
    folder.mkdir(parents=True)
    (tmp_path / "elsewhere").write_text("/home/someone/else\n")
    (folder / ".project_root").symlink_to(tmp_path / "elsewhere")
    assert gemini.project_path(folder) is None
    (folder / ".project_root").unlink()
    (folder / ".project_root").write_bytes(b"/work/caf\xe9\n")
    assert gemini.project_path(folder) == os.fsdecode(b"/work/caf\xe9")
    (folder / ".project_root").write_bytes(b"/work/x\x00y\n")
    projects = tmp_path / ".gemini" / "projects.json"
    projects.write_text('{"projects": {"/work/mapped": "proj"}}')
    assert gemini.project_path(folder) == "/work/mapped"
    projects.write_text("[" * 50_000)
    assert gemini.project_path(folder) is None


def test_a_fifo_as_claude_codes_session_memory_template_is_not_waited_on(tmp_path: Path) -> None:
    template = tmp_path / "template.md"
    os.mkfifo(template)
    seen: list[str] = []
    assert not waited_on_fifos(lambda: seen.append(load_template(template)), [template])
    assert seen == [DEFAULT_TEMPLATE]


# ---------------------------------------------------------------------------------------------
# The door itself


@settings(max_examples=300, deadline=None, suppress_health_check=[*PROFILE_SUPPRESSED])
@given(
    data=st.one_of(
        st.binary(max_size=300),
        st.text(alphabet="[]{}\"\\:,.= \n#'abc1", max_size=300).map(str.encode),
    )
)
def test_any_bytes_come_back_as_a_value_or_a_problem(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    """Whatever a file holds, each reader answers with a value or an :class:`Unusable` (what
    is wrong and the fix), never an exception; the nesting of what comes back is bounded."""
    path = tmp_path_factory.getbasetemp() / "foreign-door-input"
    path.write_bytes(data)
    try:
        for read in (
            foreign_file.read_json_object,
            foreign_file.read_toml,
            foreign_file.read_text,
            foreign_file.read_name,
        ):
            found = read(path, 200, links="refuse")
            if isinstance(found, Unusable):
                assert found.problem and found.fix and "\n" not in found.message()
            else:
                assert found is not None and not foreign_file.nesting_over(found, 64)
    finally:
        path.unlink()


@given(depth=st.integers(1, 200), kind=st.sampled_from(["array", "inline", "dotted", "header"]))
@settings(max_examples=60)
def test_toml_nesting_is_judged_before_decoding(depth: int, kind: str) -> None:
    text = {
        "array": "a = " + "[" * depth + "]" * depth,
        "inline": "a = " + "{b = " * depth + "1" + "}" * depth,
        "dotted": "a" + ".b" * depth + " = 1",
        "header": "[a" + ".b" * depth + "]\nx = 1",
    }[kind]
    try:
        value = foreign_file.decode_toml(text)
    except ValueError as exc:
        assert depth >= 63 and ("deeper than 64" in str(exc) or "more than 64 parts" in str(exc))
    else:
        assert depth <= 64 and not foreign_file.nesting_over(value, 64)


def test_strings_and_comments_hold_no_toml_structure() -> None:
    text = (
        'a = "[[[[ . . . \\" ]]]"\n'
        "b = '{{{{ a.b.c.d'\n"
        'c = """\n[[[[\n"""\n'
        "d = '''\n{{{{'''\n"
        "# [[[[[[[[ a.b.c.d.e.f.g\n"
        "e = 1.5\n"
    )
    assert foreign_file.toml_shape(text) == (0, 2)
    assert foreign_file.toml_shape("x = [" * 3 + "]" * 3) == (3, 1)


def test_special_files_and_links_are_refused_by_the_door(tmp_path: Path) -> None:
    target = tmp_path / "target.json"
    target.write_text('{"a": 1}')
    link = tmp_path / "link.json"
    link.symlink_to(target)
    refused = foreign_file.read_json_object(link, 100, links="refuse")
    assert isinstance(refused, Unusable) and "symbolic link" in refused.problem
    assert foreign_file.read_json_object(link, 100, links="follow") == {"a": 1}
    devlink = tmp_path / "zero"
    devlink.symlink_to("/dev/zero")
    device = foreign_file.read_bytes(devlink, 100, links="follow")
    assert isinstance(device, Unusable) and device.problem == "is a device, not a regular file"
    sock_path = tmp_path / "s"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(sock_path))
        found = foreign_file.read_bytes(sock_path, 100, links="refuse")
        assert isinstance(found, Unusable) and "socket" in found.problem
    folder = foreign_file.read_bytes(tmp_path, 100, links="refuse")
    assert isinstance(folder, Unusable) and "a directory" in folder.problem
    assert foreign_file.read_bytes(tmp_path / "none", 100, links="refuse") is None
    assert foreign_file.read_bytes(target / "below", 100, links="refuse") is None


@pytest.mark.skipif(not IS_ROOT, reason="needs root to drop to another user")
def test_a_settings_file_the_user_cannot_read_says_so(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    secret = tmp_path / "settings.json"
    secret.write_text("{}")
    secret.chmod(0o600)

    def child() -> int:
        found = foreign_file.read_json_object(secret, 100, links="follow")
        assert isinstance(found, Unusable), found
        sys.stderr.write(found.message())
        return 0

    exited = run_forked(child, uid=NOBODY)
    assert exited.code == 0, exited.stderr
    assert exited.stderr == f"{secret} cannot be read (permission denied); let your user read it"
