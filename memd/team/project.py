"""What a sync needs to know of a project's repository: its remote's URL, who the user is in
git, which paths its HEAD has, where its team folder lives on the remote.

Reads of the repository (its remote's URL, the paths of HEAD, its first commit, the remote's
default branch) run as all of memd's git calls on a user's repository do
(:func:`memd.git.run_git`: pinned, no program can run); the user's identity is read from
their git config (the repository's, then their global one) with ``git config``, which parses
files and runs nothing. Blocking: call from a worker thread.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from memd import git
from memd.git import GitFailed, WorkTree
from memd.privacy import scrub_report
from memd.team.store import Identity, url_problem

_REMOTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,99}")
_BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}")


class ProjectProblem(Exception):
    """Why a sync of the project cannot start, with what to do about it."""


@dataclass(frozen=True)
class Repository:
    """A project's repository as a sync sees it."""

    tree: WorkTree
    url: str


def repository(cwd: Path, remote: str) -> Repository:
    """The work tree of ``cwd`` and the URL of its remote ``remote``."""
    found = git.find_work_tree(cwd)
    if isinstance(found, git.NotAWorkTree):
        raise ProjectProblem(f"{cwd} is not in a git repository ({found.reason})")
    if not _REMOTE_NAME.fullmatch(remote):
        raise ProjectProblem(f"team.remote {remote!r} is not a remote's name")
    out = git.run_git(found, ["config", "--get", f"remote.{remote}.url"])
    url = out.decode("utf-8", "replace").strip() if isinstance(out, bytes) else ""
    if not url:
        raise ProjectProblem(
            f"the repository at {found.root} has no remote {remote!r}: add one "
            f"(git remote add {remote} URL) or set team.remote"
        )
    problem = url_problem(url) or credentials_problem(url)
    if problem is not None:
        raise ProjectProblem(problem)
    return Repository(found, url)


def credentials_problem(url: str) -> str | None:
    """Why memd will not keep or pass ``url``: a password or token written into it."""
    if scrub_report(url).secrets:
        return (
            "the remote's URL holds a password or token; memd stores no credentials: give "
            "git a credential helper (git config credential.helper) and a URL without it"
        )
    return None


def identity(tree: WorkTree | None, user_env: Mapping[str, str]) -> Identity:
    """The user's git identity (``user.name``, ``user.email``): the repository's config,
    else the global one; ``unknown`` when neither says."""
    env = {
        **user_env,
        "GIT_CONFIG_NOSYSTEM": "1",
        "LC_ALL": "C",
        "PATH": "/usr/local/bin:/usr/bin:/bin",
    }
    argv = ["config", "-z", "--get-regexp", r"^user\.(name|email)$"]
    if tree is not None:
        env["GIT_DIR"] = str(tree.git_dir)
    else:
        env.pop("GIT_DIR", None)
        argv = ["config", "--global", *argv[1:]]
    exe = git.git_executable()
    found: dict[str, str] = {}
    if exe is not None:
        cwd = tree.root if tree is not None else Path(user_env.get("HOME") or "/")
        done = git.run_bounded([exe, *argv], cwd, env, b"", git.GIT_TIMEOUT_S)
        out = done[1] if done is not None and done[0] == 0 else b""
        for item in out.split(b"\0"):
            key, _, value = item.decode("utf-8", "replace").partition("\n")
            found.setdefault(key, value)
    return Identity(found.get("user.name") or "unknown", found.get("user.email") or "")


def present_paths(tree: WorkTree, paths: Sequence[str]) -> Collection[str]:
    """Those of ``paths`` HEAD of ``tree`` has as files (one ``cat-file --batch-check``)."""
    wanted = [p for p in dict.fromkeys(paths) if "\n" not in p]
    if not wanted:
        return set()
    batch = "".join(f"HEAD:{p}\n" for p in wanted).encode()
    out = git.run_git(tree, ["cat-file", "--batch-check=%(objecttype)"], stdin=batch)
    if isinstance(out, GitFailed):
        return set(wanted)  # not checkable now: the citations are not held against it
    answers = out.decode("utf-8", "replace").split("\n")
    return {p for p, a in zip(wanted, answers, strict=False) if a == "blob"}


def default_branch(tree: WorkTree, remote: str, configured: str) -> str:
    """The branch a folder-mode sync reads: ``team.branch``, else the remote's default as
    the clone recorded it (``refs/remotes/<remote>/HEAD``), else ``main``."""
    if configured:
        if not _BRANCH.fullmatch(configured) or ".." in configured:
            raise ProjectProblem(f"team.branch {configured!r} is not a branch name")
        return configured
    out = git.run_git(tree, ["symbolic-ref", "--quiet", f"refs/remotes/{remote}/HEAD"])
    if isinstance(out, bytes):
        ref = out.decode("utf-8", "replace").strip()
        name = ref.removeprefix(f"refs/remotes/{remote}/")
        if name != ref and _BRANCH.fullmatch(name):
            return name
    return "main"


def project_key(tree: WorkTree | None, fallback: str) -> str:
    """A name for the project that is the same on every machine: the repository's first
    commit, else ``fallback`` (the project folder's name)."""
    if tree is not None:
        out = git.run_git(tree, ["rev-list", "--max-parents=0", "--max-count=1", "HEAD"])
        if isinstance(out, bytes):
            first = out.decode("ascii", "replace").strip()
            if re.fullmatch(r"[0-9a-f]{40,64}", first):
                return first
    return re.sub(r"[^A-Za-z0-9._-]", "-", fallback)[:120] or "project"


def proposal_ref(who: Identity) -> str:
    """Folder mode's branch for ``who``'s proposals: ``refs/heads/memd/team/<name>``."""
    local = who.email.partition("@")[0] or who.name
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", local).strip("-.")[:60] or "me"
    return f"refs/heads/memd/team/{slug}"
