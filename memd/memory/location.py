"""Where a session's memories live: the project's memory dir, and whether it opted out.

:func:`locate` maps a session's working directory to its project's memory dir (with the
aliases a write into it may be spelled as) and checks the per-project opt-out
(``privacy.ignore_projects`` globs, a ``.memd-ignore`` file in the project root);
:func:`locate_moved` also follows Claude Code's switches that move the memory dir.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from memd.memory.claude_code import moved_memory_dir, read_settings
from memd.memory.paths import (
    MEMORY_DIRNAME,
    check_opt_out,
    match_ignore_globs,
    project_dir,
    project_root,
)


@dataclass(frozen=True)
class Location:
    memory_dir: Path
    aliases: tuple[str, ...]  # the dir as computed and resolved, for write detection
    opted_out: str | None


def locate(projects_root: Path, cwd: str, globs: Sequence[str], home: str | None) -> Location:
    """Where a session in ``cwd`` keeps its memories, and whether it opted out (blocking)."""
    if not os.path.isabs(cwd):
        raise ValueError(f"cwd must be an absolute path, got {cwd!r}")
    root = project_root(Path(cwd))
    directory = project_dir(projects_root, root) / MEMORY_DIRNAME  # memory_dir, from root
    aliases = tuple(dict.fromkeys((str(directory), os.path.realpath(directory))))
    opted = check_opt_out(Path(cwd), globs, home=home, root=root)
    return Location(directory, aliases, opted.reason if opted else None)


def locate_moved(
    projects_root: Path,
    cwd: str,
    globs: Sequence[str],
    home: str | None,
    claude_dir: str,
    env: Mapping[str, str],
) -> Location:
    """:func:`locate`, with the memory dir where Claude Code's switches move it: ``env``
    (the variables the newest hook in ``cwd`` forwarded), ``autoMemoryDirectory`` from the
    user, local or policy settings under ``claude_dir`` (:func:`moved_memory_dir`). Blocking."""
    where = locate(projects_root, cwd, globs, home)
    settings = read_settings(claude_dir, cwd)
    moved = moved_memory_dir(settings, env, home, where.memory_dir.parent.name)
    if moved is None:
        return where
    path = moved[0]
    return Location(Path(path), (path, os.path.realpath(path)), where.opted_out)


def locate_project(
    projects_root: Path, project: str, globs: Sequence[str], home: str | None
) -> Location | None:
    """The memory dir of ``project``: a project folder name or its path under
    ``projects_root``; None for a project's own path, to be located as a cwd. ``ValueError``
    for a name that is no folder of its own (``..`` would reach out of ``projects_root``)."""
    name = project
    if "/" in project:
        candidate = Path(project)
        if candidate.parent != projects_root and candidate.is_absolute():
            return None
        name = candidate.name
    if name in ("", ".", ".."):
        raise ValueError(f"not a project: {project!r}")
    directory = projects_root / name / MEMORY_DIRNAME
    glob = match_ignore_globs([name], globs, home=home)
    opted = f"matches privacy.ignore_projects glob {glob!r}" if glob else None
    return Location(directory, (str(directory),), opted)
