"""Version-control metadata in the sandbox (R-A6): never written, and git only on a checked
repository of the area's own.

Two rules, both structural:

1. **The agent never writes VCS metadata.** Write, Edit and Delete refuse any path with a
   component in :data:`VCS_METADATA` (compared casefolded, so a case-insensitive filesystem
   gives no way round it): the metadata directories of git, Mercurial, Subversion, Bazaar,
   darcs, Jujutsu, Sapling, Pijul, Monotone, Fossil and CVS, plus the two files in a git work
   tree that select programs or other repositories (``.gitattributes`` names diff drivers and
   filters, ``.gitmodules`` names other repositories). So a gitfile (``gitdir: …``), a
   ``.git/config`` with ``core.worktree`` or ``gpg.program``, or ``objects/info/alternates``
   can never come from the agent.

2. **Git runs only on a repository the area has of its own** (:func:`git_repository`), and
   then pinned to it: ``GIT_DIR`` is ``<area>/.git`` and ``GIT_WORK_TREE`` is the area, so
   there is no discovery at all (not above the area, not in a subdirectory, no gitfile
   redirect, and ``core.worktree`` is overridden by the environment). The repository must be
   a real directory owned by this user (not a link, not a gitfile), must not borrow objects
   or refs from elsewhere (no ``objects/info/alternates``, ``http-alternates``, ``commondir``,
   no linked ``objects`` or ``refs``), and its config may hold only keys from
   :data:`GIT_SAFE_KEYS` (read by git itself with includes off). Anything else and the shell
   answers that git is not available in this area, saying why. Where the area has no
   repository (the common case for memory dirs), there is no git: rather than let git look
   anywhere else, the shell says so.

   Whatever the repository says, :data:`GIT_OVERRIDES` are passed in ``GIT_CONFIG_COUNT``
   (the command-line scope, which beats every file) so that no setting can start a program:
   fsmonitor, hooks, pager, editor, ssh, askpass, credential helpers, the gpg programs
   (``%G?`` and ``--show-signature``), and no protocol is allowed, so nothing is fetched.
   System and global config are off (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``,
   ``GIT_ATTR_NOSYSTEM``), and optional locks too, so a read never rewrites the index.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

VCS_METADATA = frozenset(
    name.casefold()
    for name in (
        ".git",
        ".gitattributes",
        ".gitmodules",
        ".hg",
        ".hgrc",
        ".svn",
        ".bzr",
        "_darcs",
        ".jj",
        ".sl",
        ".pijul",
        "_MTN",
        ".fslckout",
        "_FOSSIL_",
        ".fossil-settings",
        "CVS",
    )
)

# Keys `git init` and `git clone` write, and a few harmless ones: none names a program, a
# file, another repository, or changes which objects are read.
GIT_SAFE_KEYS = re.compile(
    r"core\.(repositoryformatversion|filemode|bare|logallrefupdates|ignorecase"
    r"|precomposeunicode|symlinks|autocrlf|eol|safecrlf|quotepath|abbrev|compression"
    r"|loosecompression)"
    r"|extensions\.objectformat"
    r"|remote\.[^\0]*\.(url|pushurl|fetch|push|tagopt|prune)"
    r"|branch\.[^\0]*\.(remote|merge|rebase|pushremote|description)"
    r"|user\.(name|email)|init\.defaultbranch|pull\.(rebase|ff)|push\.default"
    r"|gc\.auto|color\.ui|i18n\.(commitencoding|logoutputencoding)"
)

NO_PROGRAM = "/nonexistent/memd-sandbox-runs-no-program"
GIT_OVERRIDES: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", os.devnull),
    ("core.pager", "cat"),
    ("core.editor", NO_PROGRAM),
    ("core.sshCommand", NO_PROGRAM),
    ("core.askPass", NO_PROGRAM),
    ("core.attributesFile", os.devnull),
    ("core.excludesFile", os.devnull),
    ("core.untrackedCache", "false"),
    ("credential.helper", ""),
    ("gpg.program", NO_PROGRAM),
    ("gpg.openpgp.program", NO_PROGRAM),
    ("gpg.x509.program", NO_PROGRAM),
    ("gpg.ssh.program", NO_PROGRAM),
    ("gpg.ssh.defaultKeyCommand", NO_PROGRAM),
    ("gpg.ssh.allowedSignersFile", os.devnull),
    ("log.showSignature", "false"),
    ("protocol.allow", "never"),
    ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"),
    ("submodule.recurse", "false"),
    ("color.ui", "false"),
    ("core.alternateRefsCommand", NO_PROGRAM),
    ("sequence.editor", NO_PROGRAM),
)
# Entries of .git that must be real files or directories: a link here would read elsewhere.
_NOT_LINKS = ("config", "HEAD", "objects", "refs", "packed-refs", "index", "info", "shallow")
_BORROWING = ("commondir", "objects/info/alternates", "objects/info/http-alternates")
_CONFIG_TIMEOUT_S = 5.0


def vcs_part(parts: Iterable[str]) -> str | None:
    """The first path component that is VCS metadata, or None (pure)."""
    return next((part for part in parts if part.casefold() in VCS_METADATA), None)


@dataclass(frozen=True)
class Repository:
    """A repository git may run on: its ``.git`` directory and its work tree."""

    git_dir: str
    work_tree: str


def git_environment(base: Mapping[str, str], repo: Repository) -> dict[str, str]:
    """``base`` plus the variables that pin git to ``repo`` and override its config."""
    env = pinned_config_environment(base)
    env.update(
        GIT_DIR=repo.git_dir,
        GIT_WORK_TREE=repo.work_tree,
        GIT_CEILING_DIRECTORIES=str(Path(repo.work_tree).parent),
    )
    return env


def pinned_config_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` plus what keeps every git config from running a program or reaching a
    network: no system or global config, :data:`GIT_OVERRIDES` in the command-line scope,
    no lazy fetch, no protocol, no prompt, no optional locks. Shared by the sandbox and by
    memd's own git calls (:mod:`memd.git`)."""
    env = dict(base)
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_ATTR_NOSYSTEM="1",
        GIT_NO_REPLACE_OBJECTS="1",
        GIT_NO_LAZY_FETCH="1",
        GIT_OPTIONAL_LOCKS="0",
        GIT_TERMINAL_PROMPT="0",
        GIT_ALLOW_PROTOCOL="memd-none",
        GIT_PROTOCOL_FROM_USER="0",
        GIT_CONFIG_COUNT=str(len(GIT_OVERRIDES)),
    )
    for index, (key, value) in enumerate(GIT_OVERRIDES):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


def git_repository(area: Path, env: Mapping[str, str], git: str) -> Repository | str:
    """The area's own repository if git may run on it, else why not (blocking).

    ``env`` is the sandbox environment (its ``HOME`` is where ``git config`` runs);
    ``git`` the executable.
    """
    git_dir = area / ".git"
    try:
        st = os.lstat(git_dir)
    except FileNotFoundError:
        return f"{area} has no git repository of its own"
    except OSError as exc:
        return f"{git_dir} cannot be read ({exc.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return f"{git_dir} is not a directory (a link or a gitfile pointing elsewhere)"
    if st.st_uid != os.geteuid():
        return f"{git_dir} belongs to another user"
    problem = _borrowing_problem(git_dir)
    if problem is None:
        problem = _config_problem(git_dir / "config", env, git)
    return Repository(str(git_dir), str(area)) if problem is None else problem


def _borrowing_problem(git_dir: Path) -> str | None:
    for name in _NOT_LINKS:
        if os.path.islink(git_dir / name):
            return f"{git_dir / name} is a symbolic link (it would read another repository)"
    for name in _BORROWING:
        if os.path.lexists(git_dir / name):
            return f"the repository borrows from another one ({git_dir / name})"
    return None


def _config_problem(config: Path, env: Mapping[str, str], git: str) -> str | None:
    if not os.path.lexists(config):
        return None
    argv = [git, "config", "--file", str(config), "--no-includes", "--null", "--name-only"]
    try:
        done = subprocess.run(
            [*argv, "--list"],
            cwd=env["HOME"],
            env=dict(env),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_CONFIG_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"its config could not be checked ({exc})"
    if done.returncode != 0:
        return f"its config could not be read ({done.stderr.decode(errors='replace').strip()})"
    for key in done.stdout.decode("utf-8", errors="replace").split("\0"):
        if key and not GIT_SAFE_KEYS.fullmatch(key.casefold()):
            return f"its config sets {key}, which the sandbox does not allow"
    return None
