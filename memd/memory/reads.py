"""What clients read of a project's memory dir: its index as it goes into context (R-M2),
its manifest rows (R-M5) and a recall's answer (R-M6: :class:`RecallAnswer`).

The index is the project's ``MEMORY.md``, or, for a memory dir with topic files and no
``MEMORY.md``, one assembled from each memory's name and description (newest first); either
is scrubbed of secrets, then cut to the configured lines and bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio.to_thread

from memd.config import Config
from memd.memory.freshness import age_text, freshness_warning
from memd.memory.frontmatter import written_ms
from memd.memory.index import CutReason, assemble_index, load_index
from memd.memory.recall import RecalledMemory, RecallResult
from memd.memory.scan import MemoryHeader, iso_mtime, manifest_line, scan_memories
from memd.memory.shared import quarantine_reason
from memd.memory.store import MemoryStore
from memd.privacy import scrub_text


@dataclass(frozen=True)
class ProjectIndex:
    """A project's index as it goes into context, and why none does (the ``memory_index``
    reply: :meth:`as_dict`); the hook and compaction read its ``text``."""

    memory_dir: str
    opted_out: str | None
    disabled: str | None
    exists: bool = False  # MEMORY.md is there
    assembled: bool = False  # no MEMORY.md: one entry per memory instead
    text: str = ""
    truncated: bool = False
    cut: CutReason | None = None
    total_lines: int = 0
    total_bytes: int = 0

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RecallAnswer:
    """What a recall for a project gives (the ``recall`` reply: :meth:`as_dict`): recall's
    result, its picks followed by the memories they link to, and the memory dir it read;
    the hook renders its ``result.memories``."""

    memory_dir: str
    opted_out: str | None
    result: RecallResult

    @property
    def memories(self) -> tuple[RecalledMemory, ...]:
        return self.result.memories

    def as_dict(self) -> dict[str, Any]:
        return {"memory_dir": self.memory_dir, "opted_out": self.opted_out, **self.result.as_dict()}


async def loaded_index(base: ProjectIndex, memory_dir: Path, config: Config) -> ProjectIndex:
    """``base`` with the index of ``memory_dir`` as loaded (whether it exists or was
    assembled, its text, the cut and the totals); blocking reads run in a worker thread."""
    memory = config.memory
    raw = await anyio.to_thread.run_sync(MemoryStore(memory_dir).read_index)
    assembled = ""
    if not raw:
        headers = await scan_headers(memory_dir, config)
        assembled = assemble_index(
            [(h.relative, h.name or "", h.description or "") for h in headers]
        )
    clean = scrub_text(raw or assembled, secrets=config.privacy.redact_secrets)
    loaded = load_index(clean, max_lines=memory.index_max_lines, max_bytes=memory.index_max_bytes)
    return dataclasses.replace(
        base,
        exists=bool(raw),
        assembled=bool(assembled),
        text=loaded.text,
        truncated=loaded.truncated,
        cut=loaded.cut,
        total_lines=loaded.total_lines,
        total_bytes=loaded.total_bytes,
    )


async def scan_headers(memory_dir: Path, config: Config) -> list[MemoryHeader]:
    """The headers of ``memory_dir``'s newest memories, as many as the manifest shows (newest
    first; in a worker thread)."""
    memory = config.memory
    scan = partial(
        scan_memories,
        memory_dir,
        max_files=memory.scan_max_files,
        head_lines=memory.frontmatter_lines,
    )
    return await anyio.to_thread.run_sync(scan)


def manifest_rows(headers: Sequence[MemoryHeader], now_ms: int) -> list[dict[str, Any]]:
    """One manifest row per header (``memdctl memories``): its age as of ``now_ms`` from when
    it was written (``written``: the mtime, or its ``modified`` when earlier, as recall and
    the hook age it), and whether it is pinned."""
    return [_manifest_row(h, written_ms(h.mtime_ms, h.modified), now_ms) for h in headers]


def _manifest_row(h: MemoryHeader, written: int, now_ms: int) -> dict[str, Any]:
    return {
        "path": str(h.path),
        "relative": h.relative,
        "name": h.name,
        "description": h.description,
        "type": h.type,
        "mtime": iso_mtime(h.mtime_ms),
        "written": iso_mtime(written),
        "age": age_text(written, now_ms),
        "warning": freshness_warning(written, now_ms),
        "pinned": h.pinned,
        "author": h.author,
        "agent": h.agent,
        "quarantined": quarantine_reason(h.relative, _head_text(h)),
        "problems": list(h.problems),
        "line": manifest_line(h),
    }


def _head_text(h: MemoryHeader) -> str:
    """What a listing knows of a memory's text: its name, description and first lines."""
    return "\n".join((h.name or "", h.description or "", h.body_head))
