"""What a client must re-read after compaction (R-C5): the files the agent read recently.

Compaction drops the tool results that showed those files, so the newest few are handed back
with their current contents: at most ``restore_max_files``, at most ``restore_max_tokens``
together, newest first, skipping any file a kept message still shows. The planning is pure;
:func:`load_restore_files` is the thin shell that reads the files at request time.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from memd.compaction.message import Msg, TokenEstimator, block_type
from memd.compaction.microcompact import is_cleared
from memd.config import CompactionConfig
from memd.regular_file import read_text_target

READ_TOOL = "Read"


@dataclass(frozen=True)
class ReadRecord:
    """A file read with the Read tool; larger ``order`` = read more recently."""

    path: str
    order: int


@dataclass(frozen=True)
class RestoredFile:
    path: str
    order: int
    content: str
    tokens: int


def recently_read(msgs: Sequence[Msg]) -> list[ReadRecord]:
    """Files read in ``msgs``, one record per path (its latest read), newest first."""
    latest: dict[str, int] = {}
    order = 0
    for m in msgs:
        for path, _ in _read_calls(m):
            latest[path] = order
            order += 1
    return sorted((ReadRecord(p, o) for p, o in latest.items()), key=lambda r: -r.order)


def _read_calls(msg: Msg) -> list[tuple[str, str]]:
    """(file path, tool-call id) of the Read calls an assistant message makes."""
    if msg.role != "assistant":
        return []
    calls: list[tuple[str, str]] = []
    for b in msg.content:
        if block_type(b) != "tool_use" or b.get("name") != READ_TOOL:
            continue
        args, ident = b.get("input"), b.get("id")
        path = args.get("file_path") if isinstance(args, dict) else None
        if isinstance(path, str) and path and isinstance(ident, str):
            calls.append((path, ident))
    return calls


def visible_paths(kept: Sequence[Msg]) -> set[str]:
    """Paths whose Read call and (uncleared) result are both in ``kept``."""
    shown = {
        b.get("tool_use_id")
        for m in kept
        if m.role == "user"
        for b in m.content
        if block_type(b) == "tool_result" and not is_cleared(b)
    }
    return {path for m in kept for path, ident in _read_calls(m) if ident in shown}


def plan_restore(
    candidates: Sequence[RestoredFile], visible: Collection[str], cfg: CompactionConfig
) -> list[RestoredFile]:
    """Choose the files to restore, newest first.

    Files still visible are skipped; of the rest the ``restore_max_files`` newest are
    considered, and each is taken if it fits in what is left of ``restore_max_tokens`` (a file
    too big for the budget is passed over, so an older smaller one can still come back).
    """
    fresh = sorted((c for c in candidates if c.path not in visible), key=lambda c: -c.order)
    chosen: list[RestoredFile] = []
    used = 0
    for c in fresh[: cfg.restore_max_files]:
        if used + c.tokens <= cfg.restore_max_tokens:
            chosen.append(c)
            used += c.tokens
    return chosen


async def load_restore_files(
    records: Sequence[ReadRecord],
    visible: Collection[str],
    *,
    estimate: TokenEstimator,
    cfg: CompactionConfig,
    cwd: Path | None = None,
) -> list[RestoredFile]:
    """Read the current contents of the newest candidate files and plan the restore.

    Files that are gone, unreadable, not UTF-8 text, or far too large for the token budget are
    skipped (the next older file takes their place).
    """
    max_bytes = cfg.restore_max_tokens * 16
    loaded: list[RestoredFile] = []
    for record in sorted(records, key=lambda r: -r.order):
        if len(loaded) >= cfg.restore_max_files:
            break
        if record.path in visible:
            continue
        path = Path(record.path)
        if not path.is_absolute() and cwd is not None:
            path = cwd / path
        content = await anyio.to_thread.run_sync(read_text_target, path, max_bytes)
        if content is not None:
            loaded.append(RestoredFile(record.path, record.order, content, estimate(content)))
    return plan_restore(loaded, visible, cfg)
