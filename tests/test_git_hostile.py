"""memd's own git calls on a repository whose config names programs (issue 26): every key
that can start a program points at a canary that leaves a file, and every check memd makes
(work tree, HEAD, renames, commit counts, unknown commits, a dirty work tree) leaves every
canary untouched. The same repository serves the daemon test in test_citations_e2e.py."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import pytest

from memd import git
from memd.memory.citations import Citation, infer
from memd.memory.verify import Verifier
from tests.citation_support import Repo, numbered

HOOKS = (
    "pre-commit",
    "post-checkout",
    "post-index-change",
    "reference-transaction",
    "pre-auto-gc",
    "fsmonitor-watchman",
    "post-rewrite",
)


def canary(folder: Path, name: str) -> str:
    """A program that records that it ran, as ``folder/ran-<name>``."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    script.write_text(f"#!/bin/sh\ntouch '{folder}/ran-{name}'\ncat >/dev/null 2>&1\nexit 0\n")
    script.chmod(0o755)
    return str(script)


def ran(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("ran-*"))


def make_hostile(repo: Repo, canaries: Path) -> None:
    """Arm ``repo``: its config, an included config, hooks and attributes all name canaries.
    Done after its history is made (the test's own git would run them)."""
    hooks = canaries / "hooks"
    hooks.mkdir(parents=True)
    for name in HOOKS:
        os.symlink(canary(canaries, f"hook-{name}"), hooks / name)
    included = canaries / "included.config"
    included.write_text(
        f"[core]\n\tfsmonitor = {canary(canaries, 'included-fsmonitor')}\n"
        f"\tpager = {canary(canaries, 'included-pager')}\n"
    )
    keys = {
        "core.fsmonitor": canary(canaries, "fsmonitor"),
        "core.pager": canary(canaries, "pager"),
        "core.editor": canary(canaries, "editor"),
        "core.sshCommand": canary(canaries, "ssh"),
        "core.askPass": canary(canaries, "askpass"),
        "core.hooksPath": str(hooks),
        "core.alternateRefsCommand": canary(canaries, "alternate-refs"),
        "core.gitProxy": canary(canaries, "git-proxy"),
        "sequence.editor": canary(canaries, "sequence-editor"),
        "diff.external": canary(canaries, "diff-external"),
        "diff.evil.textconv": canary(canaries, "textconv"),
        "diff.evil.command": canary(canaries, "diff-command"),
        "filter.evil.clean": canary(canaries, "filter-clean"),
        "filter.evil.smudge": canary(canaries, "filter-smudge"),
        "filter.evil.process": canary(canaries, "filter-process"),
        "filter.evil.required": "true",
        "gpg.program": canary(canaries, "gpg"),
        "gpg.ssh.program": canary(canaries, "gpg-ssh"),
        "gpg.ssh.allowedSignersFile": str(repo.root.parent / "keys" / "allowed"),
        "log.showSignature": "true",
        "credential.helper": "!" + canary(canaries, "credential"),
        "uploadpack.packObjectsHook": canary(canaries, "pack-objects-hook"),
        "remote.origin.url": "ext::" + canary(canaries, "remote-ext"),
        "remote.origin.promisor": "true",
        "include.path": str(included),
    }
    for key, value in keys.items():
        repo.git("config", key, value)
    attributes = "* diff=evil filter=evil\n"
    repo.write(".gitattributes", attributes)
    (Path(repo.git("rev-parse", "--absolute-git-dir").strip()) / "info").mkdir(exist_ok=True)
    (Path(repo.git("rev-parse", "--absolute-git-dir").strip()) / "info" / "attributes").write_text(
        attributes
    )
    assert ran(canaries) == []


@contextmanager
def disarmed(repo: Repo) -> Iterator[None]:
    """The test's own git commands on an armed repository, with its config and attributes
    set aside (they would run the canaries the test is about)."""
    git_dir = repo.root / ".git"
    aside = [git_dir / "config", git_dir / "info" / "attributes", repo.root / ".gitattributes"]
    for path in aside:
        path.rename(path.with_name(path.name + ".armed"))
    (git_dir / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n[user]\n\tname = t\n\temail = t@example.invalid\n"
    )
    try:
        yield
    finally:
        for path in aside:
            path.with_name(path.name + ".armed").replace(path)


def hostile_repository(tmp_path: Path) -> tuple[Repo, Path, str]:
    """A repository with history (a rename signed with an ssh key, edits, a branch), armed;
    its first commit."""
    repo = Repo(tmp_path / "proj")
    repo.write("src/retry.py", "def backoff(n):\n    return min(60, 2**n)\n")
    repo.write("src/old.py", numbered(4))
    repo.write("README.md", numbered(3))
    first = repo.commit("start")
    repo.git("mv", "src/old.py", "src/new.py")
    repo.write("README.md", numbered(5))
    repo.git("add", "-A")
    signed_commit(repo, tmp_path / "keys", "rename and edit", "ssh")
    canaries = tmp_path / "canaries"
    make_hostile(repo, canaries)
    return repo, canaries, first


def signed_commit(repo: Repo, keys: Path, message: str, kind: str) -> None:
    """Commit what is staged, signed with a new ``kind`` key (``ssh``, or ``openpgp`` when
    gpg is installed: the caller skips without it), so a git command that shows signatures
    (``log.showSignature``) on this commit runs ``gpg.ssh.program`` or ``gpg.program``. The
    ssh key is named in ``keys/allowed`` (git verifies nothing without such a file)."""
    keys.mkdir(parents=True, exist_ok=True)
    commit = ["commit", "-q", "--no-verify", "-S", "-m", message]
    run = partial(subprocess.run, check=True, capture_output=True, timeout=30, cwd=repo.root)
    if kind == "ssh":
        key = keys / "ssh"
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "t", "-f", str(key)])
        (keys / "allowed").write_text(f"t@example.invalid {(keys / 'ssh.pub').read_text()}")
        repo.git("-c", "gpg.format=ssh", "-c", f"user.signingKey={key}", *commit)
        return
    home = tempfile.mkdtemp(prefix="g", dir="/tmp")  # short: gpg-agent's socket lives there
    env = {**repo.env(), "GNUPGHOME": home}
    try:
        gpg = ["gpg", "--batch", "--quiet", "--passphrase", "", "--quick-gen-key"]
        run([*gpg, "t@example.invalid", "ed25519", "sign", "never"], env=env)
        run(["git", "-c", "user.signingKey=t@example.invalid", *commit], env=env)
    finally:
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False, timeout=30)
        shutil.rmtree(home, ignore_errors=True)


def test_no_git_call_memd_makes_runs_a_program_the_repository_names(tmp_path: Path) -> None:
    repo, canaries, first = hostile_repository(tmp_path)
    repo.write("README.md", "dirty in the work tree\n")  # status would run filters here
    tree = git.find_work_tree(repo.root / "src")
    assert isinstance(tree, git.WorkTree) and tree.root == repo.root
    head = git.head(tree)
    assert isinstance(head, git.Head) and head.branch == "main"
    assert git.renamed_to(tree, first, "src/old.py") == "src/new.py"
    assert git.renamed_to(tree, None, "src/old.py") == "src/new.py"
    assert git.commits_touching(tree, first, "README.md") == 1
    assert git.known_commits(tree, [first, "0" * 40]) == frozenset({first})
    entries = git.index_entries(tree)
    assert isinstance(entries, dict) and set(entries) == {"README.md", "src/new.py", "src/retry.py"}
    assert ran(canaries) == []


def test_checking_memories_in_a_hostile_repository_runs_no_program(tmp_path: Path) -> None:
    repo, canaries, first = hostile_repository(tmp_path)
    verifier = Verifier()
    where = verifier.repository(repo.root)
    cited = verifier.baseline(where, infer("`backoff()` in src/retry.py and README.md:1-2"))
    assert [c.path for c in cited] == ["src/retry.py", "README.md"]
    stale = (
        Citation("src/old.py", None, (), first, "main", "0" * 16),
        Citation("README.md", (1, 2), (), first, "main", "0" * 16),
        Citation("src/retry.py", None, ("backoff",), "1" * 40, "elsewhere", None),
    )
    repo.write("src/retry.py", "changed\n")
    warnings = verifier.check(where, (*cited, *stale)).warnings
    assert "src/old.py (cited) no longer exists; git saw it renamed to src/new.py" in warnings
    assert any(w.startswith("lines 1-2 of README.md changed") for w in warnings)
    assert any("is not in this repository" in w for w in warnings)
    assert any("written on branch elsewhere" in w for w in warnings)
    assert "backoff is no longer in src/retry.py" in warnings
    assert ran(canaries) == []


def test_signed_commits_run_no_signature_program(tmp_path: Path) -> None:
    """The repository's own config shows signatures (``log.showSignature``) and both of its
    renames are signed (ssh, OpenPGP), so the ``git log`` memd runs to follow a rename would
    run the signature programs the config names, were they not overridden: it runs none."""
    if shutil.which("gpg") is None:
        pytest.skip("gpg is not installed (the ssh signature is armed in every hostile test)")
    repo, canaries, first = hostile_repository(tmp_path)
    with disarmed(repo):
        repo.git("mv", "src/new.py", "src/newest.py")
        signed_commit(repo, tmp_path / "keys", "rename again", "openpgp")
    repo.git("log", "--format=", "-n", "3")  # the canaries are live: git itself runs them
    assert {"ran-gpg", "ran-gpg-ssh"} <= set(ran(canaries)), ran(canaries)
    for fired in canaries.glob("ran-*"):
        fired.unlink()
    tree = git.find_work_tree(repo.root)
    assert isinstance(tree, git.WorkTree)
    assert git.renamed_to(tree, first, "src/old.py") == "src/newest.py"
    assert git.renamed_to(tree, None, "src/old.py") == "src/newest.py"
    verifier = Verifier()
    where = verifier.repository(repo.root)
    stale = (Citation("src/old.py", None, (), first, "main", "0" * 16),)
    warnings = verifier.check(where, stale).warnings
    assert "src/old.py (cited) no longer exists; git saw it renamed to src/newest.py" in warnings
    assert ran(canaries) == []


def test_output_past_the_cap_is_cut_as_it_is_read_and_git_stopped(tmp_path: Path) -> None:
    """A blob four times the cap: memd holds the cap (and its copy), never the whole output
    before cutting it, and the git it ran is gone when the call returns."""
    repo = Repo(tmp_path / "proj")
    repo.write("big.txt", "a line of a very large generated file\n" * (git.MAX_OUTPUT_BYTES // 9))
    repo.commit()
    tree = git.find_work_tree(repo.root)
    assert isinstance(tree, git.WorkTree)
    tracemalloc.start()
    try:
        out = git.run_git(tree, ["cat-file", "blob", "HEAD:big.txt"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(out, bytes) and len(out) == git.MAX_OUTPUT_BYTES
    assert out.startswith(b"a line of a very large generated file\n")
    assert peak < 2.5 * git.MAX_OUTPUT_BYTES, peak
    assert git.run_git(tree, ["cat-file", "-s", "HEAD:big.txt"]) == b"%d\n" % (
        len("a line of a very large generated file\n") * (git.MAX_OUTPUT_BYTES // 9)
    )


def test_a_git_that_does_not_answer_is_killed_with_its_group(tmp_path: Path) -> None:
    """A git that starts a program which does not end (an alias given on the command line
    here: memd's own calls name git's commands, which no alias can replace): the call ends
    at its timeout, and the program git started is killed with it, not left running."""
    repo = Repo(tmp_path / "proj")
    repo.write("a.txt", "a\n")
    repo.commit()
    tree = git.find_work_tree(repo.root)
    assert isinstance(tree, git.WorkTree)
    sleep = f"sleep 47.{secrets.randbelow(10**6):06d}"  # this run's own
    hung = git.run_git(tree, ["-c", f"alias.x=!{sleep}", "x"], timeout_s=0.5)
    assert isinstance(hung, git.GitFailed) and "did not answer" in hung.reason
    left = subprocess.run(["pgrep", "-f", sleep], capture_output=True, check=False)
    assert left.stdout == b"", left.stdout
