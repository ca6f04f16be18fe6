"""memd's memories in Gemini CLI's own project memory file (``agents.gemini.native_memory``).

Gemini CLI reads ``~/.gemini/tmp/<project>/memory/MEMORY.md`` when a session starts and sends
it with every request. :class:`GeminiNative` keeps memd's block there
(:mod:`.memory_block`): the project's folder is the one ``projects.json`` maps the session's
working dir to (else the one whose ``.project_root`` names it); the file is read and written
beneath a descriptor of ``~/.gemini/tmp`` with no link followed, capped, atomically and only
when it still holds what was read (compare and swap). A link the user made at ``MEMORY.md``
itself (a dotfiles copy) is theirs: the file it points to is edited, in its own folder, and
only when it is a Markdown file of the user's. A file memd cannot use is left as it is and
named in the log.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from memd import foreign_reads
from memd.config import LoadedConfig
from memd.confined import Area, Refused
from memd.sources.base import plain_name
from memd.sources.gemini.memory_block import (
    Tangled,
    held,
    made_by_memd,
    render,
    with_block,
    without_block,
)
from memd.sources.native import Served

log = logging.getLogger(__name__)

FILE: Final = "memory/MEMORY.md"
MAX_FILE: Final = 1024 * 1024  # a bigger MEMORY.md is not the user's index: left alone
_SMALL: Final = 1024 * 1024
_PATH_MAX: Final = 64 * 1024
MAX_FOLDERS: Final = 4096  # project folders looked at for a .project_root
Change = Callable[[bytes | None], bytes | None]


class GeminiNative:
    """Gemini CLI's own memory file (:class:`memd.sources.native.NativeMemory`)."""

    def __init__(self) -> None:
        self._trouble: str | None = None

    def trouble(self) -> str | None:
        return self._trouble

    def enabled(self, loaded: LoadedConfig) -> bool:
        return loaded.config.agents.gemini.native_memory

    def budget(self, loaded: LoadedConfig) -> int:
        return loaded.config.agents.gemini.native_max_bytes

    def served(self, loaded: LoadedConfig, cwd: str) -> frozenset[str]:
        where = memory_file(loaded.paths.gemini_dir, cwd)
        if where is None:
            return frozenset()
        try:
            data = _read(*where)
        except (OSError, ValueError):
            return frozenset()
        return held(data) if data is not None else frozenset()

    def serve(self, loaded: LoadedConfig, cwd: str, memories: Sequence[Served]) -> str:
        where = memory_file(loaded.paths.gemini_dir, cwd)
        if where is None:
            return "no Gemini project folder for this working dir"
        budget = self.budget(loaded)
        self._trouble = None
        try:
            return update(*where, lambda data: _changed(data, memories, budget))
        except Tangled as exc:
            self._trouble = f"left alone: {exc}"
        except (OSError, ValueError) as exc:
            log.warning("memd cannot serve Gemini's memory file for %s: %s", cwd, exc)
            self._trouble = f"not written: {exc}"
        return self._trouble

    def take_out(self, loaded: LoadedConfig) -> int:
        if self.enabled(loaded):
            return 0
        root, changed = loaded.paths.gemini_dir / "tmp", 0
        try:
            with os.scandir(root) as entries:
                names = [e.name for e, _ in zip(entries, range(MAX_FOLDERS), strict=False)]
        except OSError:
            return 0
        for name in names:
            try:
                said = update(root, f"{name}/{FILE}", _taken_out) if plain_name(name) else ""
            except (OSError, ValueError):  # Tangled too: not a block of memd's
                continue
            changed += said not in ("", "unchanged")
        return changed


def _taken_out(data: bytes | None) -> bytes | None:
    if data is None or made_by_memd(data):
        return None
    return without_block(data)


def _changed(data: bytes | None, memories: Sequence[Served], budget: int) -> bytes | None:
    """What the file should hold (None: no file)."""
    made = data is None or made_by_memd(data)
    block, _ = render(memories, budget, made=made)
    if not block:
        return None if data is None or made_by_memd(data) else without_block(data)
    return with_block(data or b"", block)


def memory_file(home: Path, cwd: str) -> tuple[Path, str] | None:
    """``tmp`` and the memory file's path beneath it for the project at ``cwd``, or None
    when Gemini has no folder for it."""
    if not cwd.startswith("/") or "\0" in cwd:
        return None
    root = home / "tmp"
    table = foreign_reads.read_json_object(home / "projects.json", _SMALL, links="refuse")
    projects = table.get("projects", table) if table is not None else None
    slug = projects.get(cwd) if isinstance(projects, dict) else None
    if not (isinstance(slug, str) and plain_name(slug)):
        slug = _by_project_root(root, cwd)
    return (root, f"{slug}/{FILE}") if slug else None


def _by_project_root(root: Path, cwd: str) -> str | None:
    try:
        with os.scandir(root) as entries:
            for count, entry in enumerate(entries):
                if count >= MAX_FOLDERS:
                    break
                marker = Path(entry.path) / ".project_root"
                text = foreign_reads.read_name(marker, _PATH_MAX, links="refuse")
                if text is not None and text.strip() == cwd:
                    return entry.name
    except OSError:
        return None
    return None


def _target(root: Path, relative: str) -> tuple[Path, str]:
    """Where the file's bytes are: beneath ``root``, or where a link of the user's at the
    file itself points (a Markdown file; its folder held as the area)."""
    with Area.open(root) as area:
        info = area.lstat(relative)
    if info is None or not stat.S_ISLNK(info.st_mode):
        return root, relative
    if info.st_uid != os.getuid():
        raise Refused(str(root / relative), "a link of another user's")
    real = Path(os.path.realpath(root / relative))
    if real.suffix.lower() != ".md" or not plain_name(real.name):
        raise Refused(str(root / relative), f"a link to {real}, not a Markdown file")
    return real.parent, real.name


def _read(root: Path, relative: str) -> bytes | None:
    """The file's bytes (None: no file); ``ValueError`` past :data:`MAX_FILE`."""
    base, name = _target(root, relative)
    try:
        with Area.open(base) as area:
            data, _ = area.read(name, max_bytes=MAX_FILE + 1)
    except FileNotFoundError:
        return None
    if len(data) > MAX_FILE:
        raise ValueError(f"{base / name} is over {MAX_FILE} bytes")
    return data


def update(root: Path, relative: str, change: Change) -> str:
    """Rewrite the file as ``change`` says from what it holds (None in or out: no file),
    beneath ``root``; what happened."""
    base, name = _target(root, relative)
    with Area.open(base) as area:
        try:
            data: bytes | None = area.read(name, max_bytes=MAX_FILE + 1)[0]
        except FileNotFoundError:
            data = None
        if data is not None and len(data) > MAX_FILE:
            return f"left alone: over {MAX_FILE} bytes"
        new = change(data)
        if new == data:
            return "unchanged"
        if new is None:
            area.unlink(name)
            return "removed the file memd made"
        if not area.write(name, new, expected=data):
            return "changed meanwhile: left for the next time"
        return "written"
