"""Where a session's memories live: the project's memory dir, and whether it opted out.

:func:`locate` maps a session's working directory to its project's memory dir (with the
aliases a write into it may be spelled as) and checks the per-project opt-out
(``privacy.ignore_projects`` globs, a ``.memd-ignore`` file in the project root).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from memd.memory.paths import MEMORY_DIRNAME, check_opt_out, match_ignore_globs, memory_dir


@dataclass(frozen=True)
class Location:
    memory_dir: Path
    aliases: tuple[str, ...]  # the dir as computed and resolved, for write detection
    opted_out: str | None


def locate(projects_root: Path, cwd: str, globs: Sequence[str], home: str | None) -> Location:
    """Where a session in ``cwd`` keeps its memories, and whether it opted out (blocking)."""
    if not os.path.isabs(cwd):
        raise ValueError(f"cwd must be an absolute path, got {cwd!r}")
    directory = memory_dir(projects_root, Path(cwd))
    aliases = tuple(dict.fromkeys((str(directory), os.path.realpath(directory))))
    opted = check_opt_out(Path(cwd), globs, home=home)
    return Location(directory, aliases, opted.reason if opted else None)


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
