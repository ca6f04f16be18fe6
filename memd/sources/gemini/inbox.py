"""memd's new memories as a proposal in Gemini CLI's memory inbox (``agents.gemini.
propose_memories``): propose, don't write.

Gemini CLI 0.61.0's ``/memory inbox`` lists every ``*.patch`` below
``~/.gemini/tmp/<project>/memory/.inbox/private/`` whose unified-diff headers all name a
Markdown file directly in that project's memory folder, by its absolute path (no ``a/``/``b/``
prefixes), and applies one whole patch or none (its ``listInboxMemoryPatches`` and
``applyInboxMemoryPatch``; a new file is ``--- /dev/null`` / ``+++ <path>`` /
``@@ -0,0 +1,<n> @@``; applying it adds a pointer line to ``MEMORY.md`` itself). memd keeps
its own patch there, ``memd.patch`` (Gemini's extraction agent owns ``extraction.patch``):
one new file per memory, ``memd-<name>.md``. A proposal for a file that exists already is
dropped (the whole patch would fail to apply), one for the same file again replaces the
older. Written as :mod:`.native` writes: beneath ``~/.gemini/tmp``, no link followed,
atomically, capped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Final

from memd.config import LoadedConfig
from memd.confined import Area
from memd.sources.gemini.native import memory_file

PATCH: Final = ".inbox/private/memd.patch"
MAX_PATCH: Final = 256 * 1024
MAX_LINES: Final = 400  # of one proposed memory
NEW: Final = "--- /dev/null\n"
_UNSAFE: Final = re.compile(r"[^a-z0-9_-]+")


class GeminiInbox:
    """Gemini CLI's review inbox (:class:`memd.sources.native.Proposals`)."""

    def enabled(self, loaded: LoadedConfig) -> bool:
        return loaded.config.agents.gemini.propose_memories

    def propose(self, loaded: LoadedConfig, cwd: str, memories: Sequence[tuple[str, str]]) -> str:
        where = memory_file(loaded.paths.gemini_dir, cwd)
        if where is None:
            return "no Gemini project folder for this working dir: nothing proposed"
        root, relative = where
        folder = relative.rpartition("/")[0]  # <project>/memory
        absolute = str(root / folder)
        with Area.open(root) as area:
            try:
                old: bytes | None = area.read(f"{folder}/{PATCH}", max_bytes=MAX_PATCH + 1)[0]
            except FileNotFoundError:
                old = None
            text = merged(old, absolute, memories, partial(_exists, area, folder))
            if text is None:
                return "nothing new to propose"
            if not text:
                area.unlink(f"{folder}/{PATCH}")
                return "every proposal was applied or taken back"
            if not area.write(f"{folder}/{PATCH}", text, expected=old):
                return "the inbox changed meanwhile: proposed next time"
        return f"proposed in {absolute}/{PATCH}"


def _exists(area: Area, folder: str, name: str) -> bool:
    return area.lstat(f"{folder}/{name}") is not None


def file_name(relative: str) -> str:
    """The proposed file's name for memd's memory ``relative``: ``memd-<stem>.md``."""
    stem = Path(relative).stem.lower()
    return "memd-" + (_UNSAFE.sub("-", stem).strip("-")[:80] or "memory") + ".md"


def hunk(target: str, text: str) -> str:
    """A new file ``target`` holding ``text``, as a unified diff."""
    lines = text.replace("\r", "").rstrip("\n").split("\n")[:MAX_LINES] or [""]
    body = "".join(f"+{line}\n" for line in lines)
    return f"{NEW}+++ {target}\n@@ -0,0 +1,{len(lines)} @@\n{body}"


def hunks_of(data: bytes) -> dict[str, str]:
    """memd's earlier proposals in its patch, by target (what is not one is dropped)."""
    text = data.decode("utf-8", "replace")
    found: dict[str, str] = {}
    for part in text.split(NEW)[1:]:
        head, _, _ = part.partition("\n")
        if head.startswith("+++ /") and part.endswith("\n"):
            found[head.removeprefix("+++ ")] = NEW + part
    return found


def merged(
    old: bytes | None,
    folder: str,
    memories: Sequence[tuple[str, str]],
    exists: Callable[[str], bool],
) -> bytes | None:
    """The patch with ``memories`` (memd's relative name, text) proposed beside what it
    held, or None when nothing changes (``b""``: none left); within :data:`MAX_PATCH` (the
    oldest go first)."""
    held = hunks_of(old) if old is not None and len(old) <= MAX_PATCH else {}
    for relative, text in memories:
        name = file_name(relative)
        held[f"{folder}/{name}"] = hunk(f"{folder}/{name}", text)
    kept = {t: h for t, h in held.items() if not exists(t.rpartition("/")[2])}
    while kept and sum(len(h.encode()) for h in kept.values()) > MAX_PATCH:
        kept.pop(next(iter(kept)))
    data = "".join(kept.values()).encode()
    return None if data == (old or b"") else data
