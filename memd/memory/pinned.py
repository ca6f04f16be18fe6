"""Pinned memories and ``[[name]]`` links: what goes to the model besides recall's choice.

Claude Code 2.1.331 marks a memory ``metadata.pinned: true`` to have it in every session:
:func:`pinned_memories` gives at most :data:`MAX_PINNED` of them (newest first), which the
hook puts ahead of what recall picks, once per session (they are marked surfaced like any
recalled memory). Its memories link to each other with ``[[name]]``: :func:`linked_memories`
follows one hop from recall's picks to the memories those names name (at most
:data:`MAX_LINKED`, never one the session has seen or recall already picked).

Both read through the same scan as recall (every header, as the ranker considers every
memory: issue 27; through :class:`memd.confined.Area`) and load what they give with recall's
loader, so a pinned or linked memory is scrubbed, cut and dated exactly as a recalled one.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Protocol

import anyio.to_thread

from memd.config import Config
from memd.memory.frontmatter import links
from memd.memory.recall import RecalledMemory, load_memories
from memd.memory.remember import name_key
from memd.memory.scan import HeaderCache, MemoryHeader, scan_memories

MAX_PINNED = 4
MAX_LINKED = 2


def pinned_headers(headers: Sequence[MemoryHeader], exclude: Collection[str]) -> list[MemoryHeader]:
    """The pinned among ``headers`` (newest first, as scanned), at most :data:`MAX_PINNED`,
    then those whose path is in ``exclude`` left out."""
    pinned = [h for h in headers if h.pinned][:MAX_PINNED]
    return [h for h in pinned if str(h.path) not in exclude]


class Picked(Protocol):
    """What following links needs of one memory recall picked (a :class:`RecalledMemory`)."""

    @property
    def path(self) -> str: ...
    @property
    def relative(self) -> str: ...
    @property
    def content(self) -> str: ...


def linked_headers(
    picked: Sequence[Picked], headers: Sequence[MemoryHeader], exclude: Collection[str]
) -> list[tuple[MemoryHeader, str]]:
    """The memories ``[[name]]`` links in ``picked`` name (one hop), in link order, at most
    :data:`MAX_LINKED`, each with the picked memory that links to it; none in ``exclude``
    or already picked."""
    by_name: dict[str, MemoryHeader] = {}
    for header in headers:
        if header.name is not None:
            by_name.setdefault(name_key(header.name), header)
    taken = set(exclude) | {m.path for m in picked}
    found: list[tuple[MemoryHeader, str]] = []
    for memory in picked:
        for name in links(memory.content):
            target = by_name.get(name_key(name))
            if target is None or str(target.path) in taken:
                continue
            taken.add(str(target.path))
            found.append((target, memory.relative))
            if len(found) >= MAX_LINKED:
                return found
    return found


async def _headers(memory_dir: Path, cfg: Config, cache: HeaderCache | None) -> list[MemoryHeader]:
    """Every memory's header, newest first: the scan cap bounds what a model's manifest
    shows, not which memory a pin or a ``[[name]]`` reaches (the cache has just read them
    all for recall's ranking, so this reads nothing more)."""
    head_lines = cfg.memory.frontmatter_lines
    if cache is not None:
        scan = partial(cache.scan, memory_dir, max_files=None, head_lines=head_lines)
    else:
        scan = partial(scan_memories, memory_dir, max_files=None, head_lines=head_lines)
    try:
        return await anyio.to_thread.run_sync(scan)
    except OSError:
        return []


async def pinned_memories(
    memory_dir: Path,
    cfg: Config,
    surfaced: Collection[str],
    now_ms: int,
    cache: HeaderCache | None = None,
) -> tuple[RecalledMemory, ...]:
    """The pinned memories of ``memory_dir`` not yet ``surfaced``, loaded (blocking I/O in a
    worker thread; never raises for a file problem)."""
    chosen = pinned_headers(await _headers(memory_dir, cfg, cache), surfaced)
    if not chosen:  # most projects pin nothing: no worker-thread call for nothing
        return ()
    load = partial(load_memories, memory_dir, chosen, now_ms, cfg.privacy.redact_secrets)
    return await anyio.to_thread.run_sync(load)


async def linked_memories(
    memory_dir: Path,
    cfg: Config,
    picked: Sequence[RecalledMemory],
    surfaced: Collection[str],
    now_ms: int,
    cache: HeaderCache | None = None,
) -> tuple[RecalledMemory, ...]:
    """The memories one ``[[name]]`` hop from recall's ``picked``, loaded as recall loads
    them, each with ``via`` naming the memory that links to it."""
    if not any(links(m.content) for m in picked):  # nothing to follow: no scan for it
        return ()
    chosen = linked_headers(picked, await _headers(memory_dir, cfg, cache), surfaced)
    if not chosen:
        return ()
    via = {str(header.path): source for header, source in chosen}
    headers = [header for header, _ in chosen]
    load = partial(load_memories, memory_dir, headers, now_ms, cfg.privacy.redact_secrets)
    loaded = await anyio.to_thread.run_sync(load)
    return tuple(replace(m, via=via.get(m.path, "")) for m in loaded)
