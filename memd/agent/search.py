"""Searching files for the Grep and Glob tools: in Python, bounded, beneath an area.

The walk is the confined one (:func:`memd.confined.tree`): every folder is opened beneath
the area's root without following a link, every file is opened the same way and checked on
its descriptor (a regular file with one link, the user's). A link, a hard-linked file, a
FIFO, a device or a socket is passed over, never followed or read, whatever it is when the
walk lists it and whatever it becomes before the open; ``.git`` folders are not searched.

Pure parts: :func:`glob_regex` and :func:`split_glob_root`. The rest blocks and runs in a
worker thread.

Patterns come from the model, so they are hostile: a backtracking pattern such as
``(a|aa)+$`` (or a glob with many ``*``) can take hours on one line. Matching uses the
``regex`` package (already installed with tiktoken) with a time limit per call and the GIL
released (``concurrent=True``), and one search has a total time budget
(``FileLimits.search_max_seconds``); past it the search stops and says so. The stdlib ``re``
has neither, and a thread stuck in it would hold the interpreter and stall the daemon.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import regex

from memd.agent.files import FileLimits, Problem, open_problem
from memd.confined import Area, Entry, Refused, kind_of, tree

GrepMode = Literal["files_with_matches", "content", "count"]
GREP_MODES: tuple[GrepMode, ...] = ("files_with_matches", "content", "count")

_GLOB_CHARS = frozenset("*?[{")
_SKIPPED_DIRS = frozenset({".git"})
_READ_ERRORS = (OSError, ValueError)
_SNIFF_BYTES = 8192


# ---------------------------------------------------------------------------------------------
# Pure


Pattern = regex.Pattern[str]


class TooSlow(Exception):
    """A search ran out of its time budget (a pattern that backtracks without end)."""


def compile_grep(pattern: str, *, ignore_case: bool = False) -> Pattern:
    """Compile a Grep pattern (Python ``re`` syntax); raises ``regex.error`` when invalid."""
    return regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)


def glob_regex(pattern: str, *, ignore_case: bool = False) -> Pattern:
    """Compile a glob over ``/``-separated relative paths.

    ``*`` and ``?`` stay within one name, ``**`` spans directories (``**/`` also matches
    none), ``[abc]``/``[!abc]`` are classes, ``{a,b}`` alternatives.
    """
    flags = regex.IGNORECASE if ignore_case else 0
    return regex.compile(_translate(pattern) + r"\Z", flags | regex.DOTALL)


@dataclass(frozen=True)
class Deadline:
    """The monotonic time a search must end by."""

    at: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        return cls(time.monotonic() + seconds)

    def left(self) -> float:
        left = self.at - time.monotonic()
        if left <= 0:
            raise TooSlow
        return left


def search_line(pattern: Pattern, text: str, deadline: Deadline) -> bool:
    """Whether ``pattern`` occurs in ``text``; raises :class:`TooSlow` past ``deadline``."""
    try:
        return pattern.search(text, timeout=deadline.left(), concurrent=True) is not None
    except TimeoutError:
        raise TooSlow from None


def match_name(pattern: Pattern, text: str, deadline: Deadline) -> bool:
    """Whether ``pattern`` matches at the start of ``text``, within ``deadline``."""
    try:
        return pattern.match(text, timeout=deadline.left(), concurrent=True) is not None
    except TimeoutError:
        raise TooSlow from None


def too_slow_note(limits: FileLimits) -> str:
    return (
        f"[search stopped after {limits.search_max_seconds:g} s: the pattern backtracks too "
        "much on these files; use a simpler pattern or a narrower path]"
    )


def _translate(pattern: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        char = pattern[i]
        i += 1
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (end := pattern.find("]", i + 1)) != -1:
            body = pattern[i:end]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            out.append("[" + ("^" if negate else "") + body.replace("\\", "\\\\") + "]")
            i = end + 1
        elif char == "{" and (end := pattern.find("}", i)) != -1 and "{" not in pattern[i:end]:
            choices = pattern[i:end].split(",")
            out.append("(?:" + "|".join(_translate(choice) for choice in choices) + ")")
            i = end + 1
        else:
            out.append(regex.escape(char))
    return "".join(out)


def split_glob_root(pattern: str) -> tuple[str, str]:
    """Split an absolute pattern into its fixed directory and the glob below it.

    ``/a/b/**/*.md`` gives ``("/a/b", "**/*.md")``; a relative pattern gives ``("", …)``.
    """
    if not pattern.startswith("/"):
        return "", pattern
    parts = pattern.split("/")
    fixed: list[str] = []
    for index, part in enumerate(parts):
        if _GLOB_CHARS & set(part):
            return "/".join(fixed) or "/", "/".join(parts[index:])
        fixed.append(part)
    head, _, tail = pattern.rpartition("/")
    return head or "/", tail


# ---------------------------------------------------------------------------------------------
# Walking and searching beneath an area (blocking)


@dataclass(frozen=True)
class Found:
    """A file found beneath an area."""

    shown: str  # its absolute path, as the model sees it
    relative: str  # beneath the area's root: what is opened
    below: str  # beneath the folder searched: what globs match
    mtime: float


@dataclass(frozen=True)
class Walk:
    found: tuple[Found, ...]
    stopped: bool  # the entry limit was reached


def found(area: Area, entry: Entry, folder: str) -> Found:
    below = entry.relative[len(folder) + 1 :] if folder else entry.relative
    return Found(str(area.path(entry.relative)), entry.relative, below, entry.info.st_mtime)


def walk(area: Area, folder: str, *, max_entries: int) -> Walk:
    """Every regular one-link file beneath ``folder`` of ``area``, in path order.

    Raises as :meth:`memd.confined.Area.open_dir` when ``folder`` itself cannot be entered.
    """
    files: list[Found] = []
    for item in tree(area, folder, skip=_SKIPPED_DIRS):
        if not isinstance(item, Entry):
            continue
        if len(files) >= max_entries:
            return Walk(tuple(files), True)
        files.append(found(area, item, folder))
    return Walk(tuple(files), False)


def glob_files(
    area: Area, folder: str, pattern: str, *, limits: FileLimits, ignore_case: bool
) -> str:
    """Files beneath ``folder`` matching ``pattern``, newest first."""
    compiled = glob_regex(pattern, ignore_case=ignore_case)
    walked = walk(area, folder, max_entries=limits.grep_max_files)
    deadline = Deadline.after(limits.search_max_seconds)
    try:
        matches = [f for f in walked.found if match_name(compiled, f.below, deadline)]
    except TooSlow:
        return too_slow_note(limits)
    matches.sort(key=lambda f: (-f.mtime, f.shown))
    lines = [f.shown for f in matches[: limits.glob_max_results]]
    if len(matches) > limits.glob_max_results:
        lines.append(f"[{len(matches) - limits.glob_max_results} more not shown; narrow it]")
    if walked.stopped:
        lines.append(f"[stopped after {limits.grep_max_files} files; search a smaller path]")
    where = area.path(folder) if folder else area.root
    return "\n".join(lines) if lines else f"No files match {pattern} under {where}"


def grep_files(
    area: Area,
    files: tuple[Found, ...],
    pattern: Pattern,
    *,
    mode: GrepMode,
    limits: FileLimits,
) -> str:
    """Search ``files`` line by line and report in ``mode``, within the time budget."""
    lines: list[str] = []
    cut = False
    deadline = Deadline.after(limits.search_max_seconds)
    for item in files:
        try:
            matches = _matching_lines(area, item.relative, pattern, limits, deadline)
        except TooSlow:
            lines.append(too_slow_note(limits))
            break
        if not matches:
            continue
        match mode:
            case "files_with_matches":
                lines.append(item.shown)
            case "count":
                lines.append(f"{item.shown}:{len(matches)}")
            case "content":
                for number, text in matches:
                    lines.append(f"{item.shown}:{number}:{text[: limits.grep_max_line_chars]}")
        if len(lines) > limits.grep_max_results:
            cut = True
            lines = lines[: limits.grep_max_results]
            break
    if cut:
        lines.append(f"[results cut at {limits.grep_max_results}; narrow the pattern or path]")
    return "\n".join(lines) if lines else "No matches found"


def _matching_lines(
    area: Area, relative: str, pattern: Pattern, limits: FileLimits, deadline: Deadline
) -> list[tuple[int, str]]:
    try:
        data, _ = area.read(relative, max_bytes=limits.grep_max_file_bytes + 1)
    except _READ_ERRORS:  # gone, or no longer a file memd reads: passed over
        return []
    if len(data) > limits.grep_max_file_bytes or b"\0" in data[:_SNIFF_BYTES]:
        return []
    text = data.decode("utf-8", errors="replace")
    lines: Iterable[tuple[int, str]] = enumerate(text.splitlines(), 1)
    return [(number, line) for number, line in lines if search_line(pattern, line, deadline)]


def filter_glob(
    found: tuple[Found, ...], pattern: str, *, ignore_case: bool, limits: FileLimits
) -> tuple[Found, ...]:
    """Keep files matching a Grep ``glob``: a pattern without ``/`` matches the file name at
    any depth, one with ``/`` the path below the folder searched. Raises :class:`TooSlow`."""
    compiled = glob_regex(pattern, ignore_case=ignore_case)
    deadline = Deadline.after(limits.search_max_seconds)
    if "/" in pattern:
        return tuple(f for f in found if match_name(compiled, f.below, deadline))
    name = os.path.basename
    return tuple(f for f in found if match_name(compiled, name(f.below), deadline))


def grep_targets(area: Area, relative: str, limits: FileLimits) -> tuple[Found, ...] | Problem:
    """The files a Grep of ``relative`` searches: the file itself, or those beneath it."""
    info = area.lstat(relative) if relative else None
    if relative and info is None:
        return Problem(f"{area.path(relative)} does not exist")
    if info is not None and not stat.S_ISDIR(info.st_mode):
        why = kind_of(info)
        if why is not None:
            return open_problem(area, relative, Refused(str(area.path(relative)), why))
        name = os.path.basename(relative)
        return (Found(str(area.path(relative)), relative, name, info.st_mtime),)
    try:
        return walk(area, relative, max_entries=limits.grep_max_files).found
    except (OSError, ValueError) as exc:
        return open_problem(area, relative, exc)
