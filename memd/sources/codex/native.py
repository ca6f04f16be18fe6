"""memd's memories in Codex CLI's own memories (``agents.codex.native_memory``).

:class:`CodexNative` keeps memd's extension (:mod:`.extension`) in ``$CODEX_HOME/memories``:
``extensions/memd/instructions.md`` and one resource per verified memory of the project
(its files named by the project, so several projects' memories sit side by side), written
beneath a descriptor of the memories folder, no link followed: only files whose first line
is memd's are rewritten or removed; anything else there (a file of the user's, a link) is
left as it is and named in ``status``. What memd serves reaches the prompt only through
Codex's consolidation, which folds the extension into ``memory_summary.md``; :meth:`served`
reads back which memories that summary carries. The memories folder is made when Codex has
not made it yet (its consolidation then runs at its next start); nothing is written while
Codex's own memories are off (it would not read them): ``status`` says so.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from memd.config import LoadedConfig
from memd.confined import Area, Refused
from memd.memory.paths import project_root
from memd.sources.base import plain_name
from memd.sources.codex.extension import (
    FOLDER,
    INSTRUCTIONS,
    RESOURCES,
    SUMMARY,
    carried,
    is_memds,
    project_key,
    resources,
)
from memd.sources.native import Served

log = logging.getLogger(__name__)

MAX_SUMMARY: Final = 1024 * 1024  # read of memory_summary.md (Codex sends ~10 KB of it)
MAX_LISTED: Final = 4_096  # entries of resources/ looked at
_HEAD: Final = 64  # bytes read to tell a file of memd's (its marker) from anyone else's
OFF_IN_CODEX: Final = (
    "Codex's own memories are off, so it reads no extension (turn them on: [features]"
    " memories = true in its config.toml)"
)


class CodexNative:
    """Codex CLI's own memories (:class:`memd.sources.native.NativeMemory`)."""

    def __init__(self, own_memory: Callable[[Path], str | None]) -> None:
        self._own_memory = own_memory  # why Codex keeps memories (its config), None: it does not
        self._trouble: str | None = None

    def enabled(self, loaded: LoadedConfig) -> bool:
        return loaded.config.agents.codex.native_memory

    def budget(self, loaded: LoadedConfig) -> int:
        return loaded.config.agents.codex.native_max_bytes

    def trouble(self) -> str | None:
        return self._trouble

    def served(self, loaded: LoadedConfig, cwd: str) -> frozenset[str]:
        home = loaded.paths.codex_home
        if self._own_memory(home) is None:
            return frozenset()  # Codex sends no summary
        try:
            with Area.open(home / "memories") as area:
                data, _ = area.read(SUMMARY, max_bytes=MAX_SUMMARY)
        except (OSError, ValueError):  # none, a link, unreadable: nothing carried
            return frozenset()
        return carried(data)

    def serve(self, loaded: LoadedConfig, cwd: str, memories: Sequence[Served]) -> str:
        if not self.enabled(loaded):
            return f"taken out of {self.take_out(loaded)} files"
        home = loaded.paths.codex_home
        why = None if self._own_memory(home) else OFF_IN_CODEX
        if why is None and cwd.startswith("/") and "\0" not in cwd:
            project = str(project_root(Path(cwd)))
            files = resources(memories, project, self.budget(loaded))
            try:
                with Area.open(home / "memories", create=True) as area:
                    return self._settled(_write(area, project_key(project), files))
            except Refused as exc:
                why = f"left alone: {exc}"
            except OSError as exc:  # full, read-only, gone: the next turn's end tries again
                why = f"not written: {exc}"
        why = why or f"not a working dir: {cwd!r}"
        log.warning("memd's memories not served to Codex: %s", why)
        self._trouble = why
        return why

    def _settled(self, outcome: str) -> str:
        self._trouble = outcome if outcome.startswith("left alone") else None
        return outcome

    def take_out(self, loaded: LoadedConfig) -> int:
        if self.enabled(loaded):
            return 0
        self._trouble = None
        try:
            with Area.open(loaded.paths.codex_home / "memories") as area:
                removed = sum(_remove(area, f"{RESOURCES}/{n}") for n in _listed(area))
                removed += _remove(area, f"{FOLDER}/instructions.md")
                area.rmdir(RESOURCES)
                area.rmdir(FOLDER)
                return removed
        except (OSError, ValueError):  # no folder, a link: nothing of memd's to take out
            return 0


def _write(area: Area, key: str, files: dict[str, bytes]) -> str:
    """memd's instructions and the project's resources as ``files`` say; what happened."""
    instructions = _memds(area, f"{FOLDER}/instructions.md", len(INSTRUCTIONS) + 1)
    if instructions is False:
        return f"left alone: {FOLDER}/instructions.md is not memd's"
    if instructions != INSTRUCTIONS:
        area.write(f"{FOLDER}/instructions.md", INSTRUCTIONS)
    changed, foreign = 0, 0
    for name in _listed(area):
        if name.startswith(key + "-") and name not in files:
            removed = _remove(area, f"{RESOURCES}/{name}")
            changed += removed
            foreign += not removed
    for name, data in files.items():
        old = _memds(area, f"{RESOURCES}/{name}", len(data) + 1)
        if old is False:
            foreign += 1
        elif old != data:
            area.write(f"{RESOURCES}/{name}", data)
            changed += 1
    if foreign:
        return f"left alone: {foreign} files in {RESOURCES} that are not memd's"
    return f"{len(files)} memories served, {changed} files changed"


def _memds(area: Area, relative: str, max_bytes: int = _HEAD) -> bytes | bool | None:
    """The file's first ``max_bytes`` when it is memd's, None when there is none, False when
    it is not memd's (someone else's file, a link, a folder)."""
    info = area.lstat(relative)
    if info is None:
        return None
    if not stat.S_ISREG(info.st_mode):
        return False
    try:
        data, _ = area.read(relative, max_bytes=max(max_bytes, _HEAD))
    except FileNotFoundError:
        return None
    except (Refused, ValueError):
        return False
    return data if is_memds(data[:_HEAD]) else False


def _remove(area: Area, relative: str) -> bool:
    """Remove the file when it is memd's; whether it was removed."""
    return isinstance(_memds(area, relative), bytes) and area.unlink(relative)


def _listed(area: Area) -> list[str]:
    """The Markdown names in memd's resources folder (none when it is not a real folder)."""
    try:
        fd = area.open_dir(RESOURCES)
    except (OSError, ValueError):
        return []
    try:
        with os.scandir(fd) as entries:
            names = [e.name for e, _ in zip(entries, range(MAX_LISTED), strict=False)]
    finally:
        os.close(fd)
    return sorted(n for n in names if n.endswith(".md") and plain_name(n))
