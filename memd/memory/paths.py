"""Where a project's memories live, and whether the user opted the project out.

* :func:`project_slug` is Claude Code's folder name for a path (FORMAT.md §1.1): every
  character outside ``[a-zA-Z0-9]`` becomes ``-``, one per UTF-16 code unit, runs kept.
  A slug longer than 200 characters is cut to 200 and suffixed with ``-`` and a hash of the full
  path. Claude Code's native builds hash with ``Bun.hash``; its Node build (and memd) use the
  portable fallback, ``abs(djb2)`` over UTF-16 units in base 36. So for paths of more than 200
  characters memd's folder may differ from the one the native build chose; shorter paths
  (nearly all) match exactly. We keep the portable hash because it is documented and stable.
* :func:`project_root` is the canonical git root of a working directory: walk up to the first
  ``.git``; a linked worktree's ``.git`` file points into ``<main>/.git/worktrees/<name>``,
  whose ``commondir`` leads back to the main repository, so every worktree and subfolder of one
  repository shares one memory dir (R-M1). Outside a repository it is the directory itself.
  Those pointers are anyone's bytes (a cloned repository, a folder above the cwd): each is
  read through :mod:`memd_client.foreign_file` (not through a link, a regular file, at most
  :data:`MAX_POINTER_BYTES`, a NUL refused); one that cannot be used makes its folder its
  own project, and ``status`` names it with the fix.
* :func:`check_opt_out` applies the privacy opt-out (R-B4): config globs and a
  ``.memd-ignore`` file in the project root.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memd.foreign_reads import noted
from memd_client import foreign_file

MAX_SLUG_CHARS = 200
MEMORY_DIRNAME = "memory"
TEAM_DIRNAME = "team"
INDEX_FILENAME = "MEMORY.md"
IGNORE_FILENAME = ".memd-ignore"
# git writes one path in each pointer file (and refuses a .git file over 1 MiB itself)
MAX_POINTER_BYTES = 64 * 1024


def project_slug(path: str) -> str:
    """Claude Code's project folder name for ``path`` (see the module docstring). A name
    read from disk may hold lone surrogates (``os.fsdecode`` of bytes that are not UTF-8):
    each is one code unit, as a JavaScript string holds one, so it becomes one ``-``."""
    units = path.encode("utf-16-le", "surrogatepass")
    chars: list[str] = []
    for i in range(0, len(units), 2):
        unit = units[i] | (units[i + 1] << 8)
        is_alnum = 48 <= unit <= 57 or 65 <= unit <= 90 or 97 <= unit <= 122
        chars.append(chr(unit) if is_alnum else "-")
    sanitized = "".join(chars)
    if len(sanitized) <= MAX_SLUG_CHARS:
        return sanitized
    return f"{sanitized[:MAX_SLUG_CHARS]}-{_base36(abs(_djb2(units)))}"


def _djb2(utf16le: bytes) -> int:
    """JavaScript's ``(hash << 5) - hash + charCodeAt(i) | 0`` over UTF-16 code units."""
    value = 0
    for i in range(0, len(utf16le), 2):
        value = ((value << 5) - value + (utf16le[i] | (utf16le[i + 1] << 8))) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _base36(number: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        number, rest = divmod(number, 36)
        out = digits[rest] + out
        if number == 0:
            return out


def find_git_root(start: Path) -> Path | None:
    """The canonical git root for ``start`` (a linked worktree maps to its main checkout).

    ``None`` outside a repository. A submodule (its ``.git`` file has no ``commondir``) is its
    own root. A worktree whose back-reference does not point at it is not trusted to share
    the main checkout's memories and is its own root.
    """
    # Physical paths, as a process's getcwd() reports them: a checkout reached through a
    # symlink and its worktrees (whose pointers git writes resolved) must agree.
    directory = Path(os.path.realpath(start))
    for candidate in (directory, *directory.parents):
        dotgit = candidate / ".git"
        if dotgit.is_dir():
            return candidate
        if dotgit.is_file():
            return _root_from_gitfile(candidate, dotgit)
    return None


def _root_from_gitfile(worktree: Path, dotgit: Path) -> Path:
    gitdir = _read_gitdir_pointer(dotgit)
    if gitdir is None:
        return worktree
    common_text = _pointer(gitdir / "commondir")
    backref = _pointer(gitdir / "gitdir") if common_text is not None else None
    if common_text is None or backref is None or not common_text.strip():
        return worktree  # a submodule or a broken pointer: the folder is its own project
    if os.path.realpath(gitdir / backref.strip()) != os.path.realpath(dotgit):
        return worktree
    common = Path(os.path.normpath(gitdir / common_text.strip()))
    return Path(os.path.realpath(common.parent if common.name == ".git" else common))


def _read_gitdir_pointer(dotgit: Path) -> Path | None:
    text = _pointer(dotgit)
    for line in (text or "").splitlines():
        if line.startswith("gitdir:"):
            target = Path(line.removeprefix("gitdir:").strip())
            return Path(os.path.normpath(dotgit.parent / target))
    return None


def _pointer(path: Path) -> str | None:
    """The text of one of git's pointer files (the ``.git`` file, the gitdir's
    ``commondir`` and ``gitdir``): a regular file of one line, not through a link, at most
    :data:`MAX_POINTER_BYTES` of it, a name kept as bytes (:func:`foreign_file.read_name`).
    ``None`` when it is missing or cannot be used (the problem goes to ``status``)."""
    found: str | None = noted(foreign_file.read_name(path, MAX_POINTER_BYTES, links="refuse"), path)
    return found


def project_root(cwd: Path) -> Path:
    """The folder whose memories a session in ``cwd`` uses: the git root, else ``cwd``."""
    return find_git_root(cwd) or Path(os.path.realpath(cwd))


def project_dir(projects_root: Path, root: Path) -> Path:
    """``<projects_root>/<slug of root>``."""
    return projects_root / project_slug(str(root))


def memory_dir(projects_root: Path, cwd: Path) -> Path:
    """``<projects_root>/<slug of the project root of cwd>/memory`` (R-M1); not created."""
    return project_dir(projects_root, project_root(cwd)) / MEMORY_DIRNAME


def team_dir(memory: Path) -> Path:
    """The optional shared subfolder of a memory dir."""
    return memory / TEAM_DIRNAME


def index_path(memory: Path) -> Path:
    return memory / INDEX_FILENAME


@dataclass(frozen=True)
class OptedOut:
    """The project is excluded from memd's memory work; ``reason`` says why."""

    reason: str


def match_ignore_globs(
    paths: Sequence[str], globs: Sequence[str], *, home: str | None = None
) -> str | None:
    """The first glob matching any of ``paths`` (project paths or slugs), else ``None``.

    ``*`` also crosses ``/`` (fnmatch semantics), so ``/work/clients/*`` covers everything
    below it. A leading ``~/`` is expanded with ``home`` when it is given.
    """
    for glob in globs:
        pattern = glob
        if home is not None and (glob == "~" or glob.startswith("~/")):
            pattern = home.rstrip("/") + glob[1:]
        pattern = pattern.rstrip("/") or "/"
        for path in paths:
            if fnmatch.fnmatchcase(path, pattern):
                return glob
    return None


def check_opt_out(
    cwd: Path, globs: Sequence[str], *, home: str | None = None, root: Path | None = None
) -> OptedOut | None:
    """Whether memory work is off for a session in ``cwd``; ``None`` means it is allowed.

    Opted out when a config glob matches the project root, the cwd, or either's slug, or when
    the project root holds a ``.memd-ignore`` file. ``root``: ``cwd``'s :func:`project_root`,
    when the caller has it (finding it again walks up the tree).
    """
    root = root or project_root(cwd)
    here = Path(os.path.realpath(cwd))
    candidates = [str(root), str(here), project_slug(str(root)), project_slug(str(here))]
    glob = match_ignore_globs(candidates, globs, home=home)
    if glob is not None:
        return OptedOut(f"matches privacy.ignore_projects glob {glob!r}")
    if (root / IGNORE_FILENAME).exists():
        return OptedOut(f"{root / IGNORE_FILENAME} exists")
    return None
