"""Whether a memory still holds: its citations checked at recall, listing and write (issue 26).

:class:`CitationChecks` is what the memory service uses, over one
:class:`~memd.memory.verify.Verifier`:

* :meth:`~CitationChecks.recalled` checks the memories a recall chose, attaches the
  warnings (``checks``), the cited places (``citations``) and ``verified``, and moves a
  memory whose citations all fail below those that verify, letting the ranker's next
  candidates that verify take its place;
* :meth:`~CitationChecks.document` checks one memory file (``memdctl memories --check``);
* :meth:`~CitationChecks.cite` gives the ``citations`` frontmatter value for a memory memd
  writes;
* :meth:`~CitationChecks.retire_candidates` names the memories whose citations have all
  failed for ``memory.citation_retire_days``: dream is offered them to fix or retire (it
  deletes nothing without its own guards; R-M8).

When each memory last verified and since when it has failed (by the memory dir's real path
and the file's relative one) are kept in
``<state>/citations.json`` (memd's own state, written with :func:`memd.atomic.persist`), so
a restart does not reset the clock. Checks are off with ``memory.verify_citations: false``.

Blocking: call from a worker thread.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from memd import git
from memd.atomic import persist
from memd.config import MemoryConfig
from memd.confined import ChangeGuard
from memd.memory.citations import Citation, from_frontmatter, infer, to_frontmatter
from memd.memory.cite_files import record_citations
from memd.memory.freshness import MS_PER_DAY
from memd.memory.frontmatter import parse_document
from memd.memory.recall import MAX_CONTENT_BYTES, RecalledMemory
from memd.memory.scan import MemoryHeader, opened_area
from memd.memory.verify import MemoryCheck, Repository, Verifier

LOG_FILE = "citations.json"
MAX_LOG_ENTRIES = 20_000
MAX_LOG_BYTES = 8 * 1024 * 1024
VERIFIED_STEP_S = 3600.0
MAX_UNRECORDED = 64


class VerificationLog:
    """Per memory file: when its citations last verified, since when they all fail."""

    def __init__(self, path: Path, clock: Callable[[], float]) -> None:
        self._path = path
        self._clock = clock
        self._lock = threading.Lock()
        self._rows: dict[str, dict[str, float]] = _load(path)
        self._dirty = False

    def record(self, memory: str, check: MemoryCheck) -> None:
        if not check.checks:
            return
        now = self._clock()
        with self._lock:
            row = self._rows.setdefault(memory, {})
            before = dict(row)
            if check.verified and now - row.get("last_verified", 0.0) >= VERIFIED_STEP_S:
                row["last_verified"] = now  # a step, so a recall is not a write each time
            if check.failing:
                row.setdefault("failing_since", now)
            else:
                row.pop("failing_since", None)
            while len(self._rows) > MAX_LOG_ENTRIES:
                self._rows.pop(next(iter(self._rows)))
            self._dirty = self._dirty or row != before

    def row(self, memory: str) -> dict[str, float]:
        with self._lock:
            return dict(self._rows.get(memory, {}))

    def verified_in(self, memory_dir: Path) -> Callable[[str], float]:
        """When each memory of ``memory_dir`` (by its relative path) last verified (0:
        never): a snapshot of the log."""
        prefix = f"{os.path.realpath(memory_dir)}/"
        with self._lock:
            found = {
                path[len(prefix) :]: row.get("last_verified", 0.0)
                for path, row in self._rows.items()
                if path.startswith(prefix)
            }
        return lambda relative: found.get(relative, 0.0)

    def failing_for(self, memory_dir: Path, days: float) -> list[str]:
        """Memory files under ``memory_dir`` (paths relative to it) whose citations have
        all failed for ``days`` or longer."""
        cut = self._clock() - days * MS_PER_DAY / 1000
        prefix = f"{os.path.realpath(memory_dir)}/"
        with self._lock:
            rows = list(self._rows.items())
        return sorted(
            path.removeprefix(prefix)
            for path, row in rows
            if path.startswith(prefix) and row.get("failing_since", cut + 1) <= cut
        )

    def save(self) -> None:
        """Write the log when it changed (never raises: see :func:`memd.atomic.persist`)."""
        with self._lock:
            if not self._dirty:
                return
            data = json.dumps(self._rows, sort_keys=True).encode()
            self._dirty = False
        persist(self._path, data)


def _load(path: Path) -> dict[str, dict[str, float]]:
    try:
        with open(path, "rb") as file:
            raw = json.loads(file.read(MAX_LOG_BYTES + 1)[:MAX_LOG_BYTES])
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(raw, dict):
        return {}
    rows: dict[str, dict[str, float]] = {}
    for key, value in list(raw.items())[-MAX_LOG_ENTRIES:]:
        if isinstance(key, str) and isinstance(value, dict):
            rows[key] = {
                k: float(v)
                for k, v in value.items()
                if k in ("last_verified", "failing_since")
                and isinstance(v, int | float)
                and not isinstance(v, bool)
                and 0 <= v < 1e12
            }
    return rows


class CitationChecks:
    """The checks the memory service runs; see the module docstring."""

    def __init__(
        self,
        state_dir: Path,
        config: Callable[[], MemoryConfig],
        *,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._config = config
        self._monotonic = monotonic
        self._wall = wall
        self._lock = threading.Lock()
        self._unrecorded: dict[str, tuple[str, float]] = {}
        self.verifier = Verifier(clock=monotonic)
        self.log = VerificationLog(state_dir / LOG_FILE, wall)

    @property
    def enabled(self) -> bool:
        return self._config().verify_citations

    def repository(self, cwd: str, memory_dir: Path) -> Repository:
        return self.verifier.repository(Path(cwd), avoid=memory_dir)

    def citations_of(
        self,
        repo: Repository,
        path: str,
        mtime_ms: int,
        recorded: Sequence[Citation] | None,
        text: str,
    ) -> tuple[Citation, ...]:
        """The recorded citations, else those inferred from ``text`` (baseline: now)."""
        if recorded is not None:
            return tuple(recorded)
        return self.verifier.inferred(repo, (path, mtime_ms), lambda: infer(text))

    def document(
        self,
        repo: Repository,
        path: str,
        mtime_ms: int,
        recorded: Sequence[Citation] | None,
        text: str,
        deadline: float | None = None,
    ) -> tuple[tuple[Citation, ...], MemoryCheck]:
        """One memory's citations and what their check found (recorded in the log)."""
        cited = self.citations_of(repo, path, mtime_ms, recorded, text)
        check = self.verifier.check(repo, cited, deadline=deadline)
        self.log.record(path, check)
        return cited, check

    def recalled(
        self,
        cwd: str,
        memory_dir: Path,
        memories: tuple[RecalledMemory, ...],
        spares: Callable[[], tuple[RecalledMemory, ...]],
        deadline: float,
    ) -> tuple[RecalledMemory, ...]:
        """``memories`` with their checks, those whose citations all fail moved last; when
        some fail, the ranker's next candidates (``spares``, loaded then) that verify take
        their places, in rank order (the failing ones keep what room is left)."""
        if not self.enabled:
            return memories
        with git.time_limit(deadline - self._monotonic()):
            checked = self._check_recalled(cwd, memory_dir, memories, deadline)
            failing = [memory for memory, check in checked if check.failing]
            kept = [memory for memory, check in checked if not check.failing]
            if failing and self._monotonic() < deadline:
                kept += self._verified_spares(cwd, memory_dir, spares(), len(failing), deadline)
        self.log.save()
        return tuple([*kept, *failing][: len(memories)])

    def _verified_spares(
        self,
        cwd: str,
        memory_dir: Path,
        spares: tuple[RecalledMemory, ...],
        wanted: int,
        deadline: float,
    ) -> list[RecalledMemory]:
        """Up to ``wanted`` of ``spares`` whose citations verify, checked in order."""
        found: list[RecalledMemory] = []
        for spare in spares:
            if len(found) >= wanted or self._monotonic() >= deadline:
                break
            ((memory, check),) = self._check_recalled(cwd, memory_dir, (spare,), deadline)
            if check.verified:
                found.append(memory)
        return found

    def _check_recalled(
        self, cwd: str, memory_dir: Path, memories: tuple[RecalledMemory, ...], deadline: float
    ) -> list[tuple[RecalledMemory, MemoryCheck]]:
        repo = self.repository(cwd, memory_dir)
        real = os.path.realpath(memory_dir)
        checked: list[tuple[RecalledMemory, MemoryCheck]] = []
        for memory in memories:
            cited, check = self.document(
                repo,
                f"{real}/{memory.relative}",
                memory.mtime_ms,
                memory.recorded_citations,
                memory.content,
                deadline,
            )
            labels = tuple(c.label for c in cited)
            verified = None if not check.checks else check.verified
            done = replace(memory, citations=labels, checks=check.warnings, verified=verified)
            checked.append((done, check))
        return checked

    def cite(self, cwd: str, memory_dir: Path, text: str) -> list[dict[str, Any]] | None:
        """The ``citations`` frontmatter value for a memory with ``text``, seen now (an
        empty list: it cites nothing); ``None`` when checks are off (no key is written)."""
        if not self.enabled or not cwd:
            return None
        repo = self.repository(cwd, memory_dir)
        return to_frontmatter(self.verifier.baseline(repo, infer(text)))

    def record(
        self,
        cwd: str,
        memory_dir: Path,
        relatives: Sequence[str],
        guard: ChangeGuard | None = None,
    ) -> tuple[str, ...]:
        """Write the citations of the memory files an agent's run wrote (``relatives``,
        below ``memory_dir``; see :func:`memd.memory.cite_files.record_citations`; ``guard``
        is told each rewrite first); the files rewritten. Nothing when checks are off or the
        run had no cwd."""
        if not self.enabled or not cwd or not relatives:
            return ()
        cite = partial(self.cite, cwd, memory_dir)
        recorded = record_citations(memory_dir, relatives, cite, guard)
        self._note_unrecorded(memory_dir, relatives, recorded.failed)
        return recorded.changed

    def _note_unrecorded(
        self, memory_dir: Path, relatives: Sequence[str], failed: Sequence[tuple[str, str]]
    ) -> None:
        """Keep the files whose citations the disk refused (shown in ``status``; the next run
        that writes one tries again, and meanwhile they are inferred when read)."""
        now = self._wall()
        with self._lock:
            for relative in relatives:
                self._unrecorded.pop(f"{memory_dir}/{relative}", None)
            for relative, why in failed:
                self._unrecorded[f"{memory_dir}/{relative}"] = (why, now)
            while len(self._unrecorded) > MAX_UNRECORDED:
                self._unrecorded.pop(next(iter(self._unrecorded)))

    def listing(
        self, cwd: str, memory_dir: Path, headers: Sequence[MemoryHeader]
    ) -> dict[str, dict[str, Any]]:
        """For ``memdctl memories --check``: each memory's citations, warnings, whether it
        verifies, and when it last did / since when it fails, by relative path."""
        repo = self.repository(cwd, memory_dir)
        real = os.path.realpath(memory_dir)
        rows: dict[str, dict[str, Any]] = {}
        with opened_area(memory_dir) as area:
            if area is None:
                return rows
            for header in headers:
                try:
                    raw, _ = area.read(header.relative, max_bytes=MAX_CONTENT_BYTES)
                except (OSError, ValueError):
                    continue
                document = parse_document(raw.decode("utf-8", errors="replace"))
                recorded = from_frontmatter(document.meta.extra)
                path = f"{real}/{header.relative}"
                cited, check = self.document(repo, path, header.mtime_ms, recorded, document.body)
                rows[header.relative] = {
                    "citations": [c.label for c in cited],
                    "checks": list(check.warnings),
                    "verified": None if not check.checks else check.verified,
                    **self.log.row(path),
                }
        self.log.save()
        return rows

    def checked_rows(
        self,
        cwd: str | None,
        memory_dir: Path,
        headers: Sequence[MemoryHeader],
        rows: Sequence[dict[str, Any]],
    ) -> str:
        """For ``memdctl memories --check``: each manifest row gets its memory's checks
        (:meth:`listing`); says what they were checked against, or why nothing was."""
        if not cwd:
            return "not checked: give the project's directory, not its folder name"
        if not self.enabled:
            return "not checked: memory.verify_citations is off"
        checks = self.listing(cwd, memory_dir, headers)
        for row in rows:
            row.update(checks.get(row["relative"], {"citations": [], "checks": []}))
        return f"checked against {cwd}"

    def statistics(self) -> dict[str, Any]:
        """For ``status``: whether checks run, the folders git was skipped in (not a work
        tree, or git refused it) with why, and the files whose citations the disk refused."""
        with self._lock:
            unrecorded = [
                {"file": path, "reason": why, "since": round(at, 3)}
                for path, (why, at) in self._unrecorded.items()
            ]
        return {
            "enabled": self.enabled,
            "git_skipped": git.skipped.as_rows(),
            "unrecorded": unrecorded,
        }

    def retire_candidates(self, memory_dir: Path) -> list[str]:
        """Memory files whose citations have all failed ``memory.citation_retire_days``."""
        if not self.enabled:
            return []
        return self.log.failing_for(memory_dir, self._config().citation_retire_days)
