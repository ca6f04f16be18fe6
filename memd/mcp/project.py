"""Which project an MCP call is about (no I/O beyond stat and realpath).

In this order, the first one given decides:

1. the tool's ``project`` argument (an absolute path);
2. the client's MCP roots (the first ``file://`` root);
3. ``$CLAUDE_PROJECT_DIR`` (set by Claude Code for the servers it starts);
4. the server's working directory.

The daemon maps the directory to the project's memory dir exactly as it maps a Claude Code
session's working directory (its git root, R-M1). ``$HOME`` and ``/`` are refused rather than
taken as a project: an agent started from the home directory would otherwise read and write
one memory shared by everything the user does. The refusal says how to name the project.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

HOW_TO_NAME = (
    "Name the project: pass the tool's `project` argument (the repository's absolute path), "
    "start memd-mcp with the project as its working directory, or set CLAUDE_PROJECT_DIR "
    "in the server's environment"
)


@dataclass(frozen=True)
class Project:
    path: str  # absolute, normalised; sent to the daemon as the cwd
    source: str  # "argument", "roots", "CLAUDE_PROJECT_DIR", "working directory"


@dataclass(frozen=True)
class NoProject:
    reason: str


def path_from_root(uri: str) -> str | None:
    """The local path of a ``file://`` root URI, else ``None``."""
    parts = urlsplit(uri)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return None
    path = unquote(parts.path)
    return path if path.startswith("/") and "\x00" not in path else None


def resolve_project(
    argument: str | None,
    roots: Sequence[str],
    env_dir: str | None,
    cwd: str | None,
    home: str | None,
) -> Project | NoProject:
    """The project directory for a call (see the module docstring)."""
    root_paths = [p for p in (path_from_root(uri) for uri in roots) if p]
    for value, source in (
        (argument, "argument"),
        (root_paths[0] if root_paths else None, "roots"),
        (env_dir, "CLAUDE_PROJECT_DIR"),
        (cwd, "working directory"),
    ):
        if value:
            return _checked(value, source, home)
    return NoProject(f"memd-mcp cannot tell which project this is. {HOW_TO_NAME}.")


def _checked(value: str, source: str, home: str | None) -> Project | NoProject:
    if "\x00" in value or not os.path.isabs(value):
        return NoProject(
            f"the project from the {source} ({value!r}) is not an absolute path. {HOW_TO_NAME}."
        )
    path = os.path.normpath(value)
    refused = {"/"}
    if home:
        refused.add(os.path.normpath(home))
    if path in refused or os.path.realpath(path) in {os.path.realpath(p) for p in refused}:
        what = "the file system root" if os.path.realpath(path) == "/" else "the home directory"
        return NoProject(
            f"the project from the {source} is {path}, {what}; memd does not keep one memory "
            f"for everything under it. {HOW_TO_NAME}."
        )
    if not os.path.isdir(path):
        return NoProject(
            f"the project from the {source} ({path}) is not a directory. {HOW_TO_NAME}."
        )
    return Project(path, source)
