"""Claude Code's ``/compact`` taken over by a fork from the notes (opt-in, issue 25).

With ``memdctl install-hooks --compact-takeover`` Claude Code runs memd's hook on PreCompact
(matcher ``manual``). Measured with the real CLI (2.1.197 and 2.1.331): a hook answering
``{"decision": "block", "reason": …}`` stops the compaction, and Claude Code shows the user
``Compaction blocked by PreCompact hook: [<hook command>]: <reason>``; the input has
``trigger`` and ``custom_instructions`` (the text after ``/compact``, else null), no token
counts. So the daemon's ``hook`` method forks the session (:meth:`CompactionService.fork`,
no model call) and blocks with one line saying how to continue: ``claude --resume <id>``.
Codex CLI 0.171.0 runs a PreCompact hook too (``trigger`` ``manual`` for ``/compact``, no
``custom_instructions``) and stops its compaction, with no model call, when the hook answers
``{"continue": false, "stopReason": …}``: the same takeover serves it (its room's fork writer,
``codex resume <id>``), printed in its dialect (:mod:`memd.sources.codex.hooks`). Gemini CLI's
PreCompress hook cannot stop a compression (0.61.0 does not read what it answers).

:func:`decide` says when (pure); :class:`TakeoverRecord` remembers, across restarts, the
sessions whose last compaction memd blocked. It lets the compaction through (Claude Code
compacts as it always does) when:

* the trigger is not ``manual``: a blocked automatic compaction shows the user nothing and
  is tried again every turn. Measured with 2.1.331 (``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=1``,
  a hook answering a block with a ``systemMessage``): neither the message nor the reason
  appears in the interactive UI (run under tmux), in ``-p`` output, in ``stream-json``
  events or in the transcript. So memd never blocks one (the hook is not even registered
  for ``auto``);
* ``/compact`` has instructions: Claude Code compacts as asked;
* memd blocked this session's previous compaction (never twice in a row: the second one
  goes through, and the one after may be taken over again);
* the context is already over the effective window, or the notes are being updated, or
  they are missing, empty or behind (level 1 would keep more than ``keep_max_tokens``);
* anything fails: the record cannot be written, the fork cannot be planned or written, or it
  takes longer than the hook may wait. The intent is recorded before the fork is written, so
  a daemon killed in between never blocks that session twice.

Mark, then act: Claude Code runs every hook a compaction matches at once (memd's installed
twice, at user and project level, all run), so several PreCompacts of one ``/compact`` reach
the daemon together, and no later than Claude Code's timeout for the hook
(:data:`SAME_COMPACTION_S`) after the first. :meth:`TakeoverRecord.begin` claims the
compaction for the first of them, on the event loop with no wait between the check and the
claim: the others let it through and change nothing (neither a fork nor the record), so a
compaction is blocked at most once, with one fork, whatever the concurrency.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memd.atomic import persist, write_text_atomic
from memd.regular_file import read_regular

log = logging.getLogger(__name__)

RECORD_FILE = "compaction-takeover.json"
COUNTS_FILE = "compaction-takeover-counts.json"
MAX_RECORD_BYTES = 1 << 20
MAX_COUNTS_BYTES = 64 << 10
MAX_REASON_CHARS = 1_000
MAX_SESSIONS = 1_000
MAX_ID_CHARS = 200
BUSY_PHASES = frozenset({"running"})
# Claude Code ends a PreCompact hook within its timeout (memd_client.hooks_install.
# TAKEOVER_TIMEOUT_S, 5 s): every hook of one compaction reaches memd within that of the first.
SAME_COMPACTION_S = 5.0


@dataclass(frozen=True)
class Take:
    """Fork the session and block the compaction."""


@dataclass(frozen=True)
class Pass:
    """Let Claude Code compact; ``reason`` is for the log and ``status``."""

    reason: str


Decision = Take | Pass


def asked(hook_input: Mapping[str, Any]) -> Pass | None:
    """A Pass when the compaction asked for is not one memd takes over, from the hook's input
    alone (the same in every hook of one compaction); else None."""
    if hook_input.get("trigger") != "manual":
        return Pass("only /compact is taken over: an automatic compaction blocked is not shown")
    instructions = hook_input.get("custom_instructions")
    if isinstance(instructions, str) and instructions.strip():
        return Pass("/compact with instructions: the agent compacts as asked")
    return None


def decide(
    hook_input: Mapping[str, Any],
    *,
    context_tokens: int,
    effective_window: int,
    blocked_last: bool,
    notes_phase: str | None,
    window: str = "",
) -> Decision:
    """Whether to take over one PreCompact (see the module docstring); ``window`` says which
    window the effective one is of, and where it came from (for the reason)."""
    asked_for = asked(hook_input)
    if asked_for is not None:
        return asked_for
    if blocked_last:
        return Pass("memd blocked this session's previous compaction")
    if context_tokens >= effective_window:
        why = f" ({window})" if window else ""
        return Pass(f"the context ({context_tokens} tokens) is over the window{why}")
    if notes_phase in BUSY_PHASES:
        return Pass("the notes are being updated")
    return Take()


def block_reason(resume: str) -> str:
    """The one line for the user that the hook blocks the compaction with (its agent's
    dialect prints it in the agent's form: :meth:`memd.sources.hooks.HookDialect.output`)."""
    return (
        f"memd compacted this session from its notes into a new session (no model call); "
        f"continue there with: {resume} (or /compact again to compact here as usual)"
    )


class TakeoverRecord:
    """Sessions whose last compaction memd blocked (id → the fork), persisted atomically,
    and how many compactions were taken over or let through, and why the last one was.

    Bounded to :data:`MAX_SESSIONS` (the oldest go first). A failed write of the record
    leaves it unchanged and raises ``OSError``: the caller then does not block. The counts
    are memd's own state (:data:`COUNTS_FILE`, through :func:`memd.atomic.persist`): a write
    that fails keeps them in memory, shows in ``status`` and is done again when the disk
    takes it, so they survive a restart (issue 38).
    """

    def __init__(self, state_dir: Path, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._path = state_dir / RECORD_FILE
        self._blocked: OrderedDict[str, str] = _load(self._path)
        self._monotonic = monotonic
        # Session → when the first PreCompact of its latest compaction came (in memory: a
        # restart takes longer than a compaction's hooks).
        self._begun: OrderedDict[str, float] = OrderedDict()
        # mark and clear run in worker threads: one at a time, so none saves a copy of the
        # record from before another's change.
        self._saving = threading.Lock()
        self._counts_path = state_dir / COUNTS_FILE
        self._counting = threading.Lock()
        self.taken, self.passed, self.last_pass = _load_counts(self._counts_path)
        self.last_error: str | None = None

    def begin(self, session_id: str) -> bool:
        """Claim the PreCompact just come for ``session_id``: True for the first of a
        compaction, False for the others (within :data:`SAME_COMPACTION_S` of the first),
        which must let it through and change nothing. Call it on the event loop, before any
        wait: the check and the claim are one step."""
        now = self._monotonic()
        first = self._begun.get(session_id)
        if first is not None and now - first < SAME_COMPACTION_S:
            return False
        self._begun[session_id] = now
        self._begun.move_to_end(session_id)
        while self._begun and (
            len(self._begun) > MAX_SESSIONS
            or now - next(iter(self._begun.values())) >= SAME_COMPACTION_S
        ):
            self._begun.popitem(last=False)
        return True

    def blocked_last(self, session_id: str) -> bool:
        return session_id in self._blocked

    def mark(self, session_id: str, fork: str) -> None:
        """Record a block (before the fork is written). Blocking; raises ``OSError``."""
        with self._saving:
            changed = OrderedDict(self._blocked)
            changed[session_id] = fork
            changed.move_to_end(session_id)
            while len(changed) > MAX_SESSIONS:
                changed.popitem(last=False)
            self._save(changed)

    def clear(self, session_id: str) -> None:
        """This session's compaction went through. Blocking; raises ``OSError``."""
        with self._saving:
            if session_id in self._blocked:
                changed = OrderedDict(self._blocked)
                del changed[session_id]
                self._save(changed)

    def _save(self, blocked: OrderedDict[str, str]) -> None:
        try:
            write_text_atomic(self._path, json.dumps({"blocked": dict(blocked)}))
        except OSError as exc:
            self.last_error = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {self._path}: {exc}"
            raise
        self._blocked = blocked

    def count_taken(self) -> None:
        """One compaction taken over, counted on disk too. Blocking; never raises."""
        with self._counting:
            self.taken += 1
            self._save_counts()

    def count_passed(self, reason: str) -> None:
        """One compaction let through for ``reason``, counted on disk too. Blocking; never
        raises."""
        with self._counting:
            self.passed += 1
            self.last_pass = reason[:MAX_REASON_CHARS]
            self._save_counts()

    def _save_counts(self) -> None:
        counts = {"taken": self.taken, "passed": self.passed, "last_pass": self.last_pass}
        persist(self._counts_path, json.dumps(counts).encode())

    def statistics(self) -> dict[str, Any]:
        return {
            "taken": self.taken,
            "passed": self.passed,
            "last_pass": self.last_pass,
            "blocked_sessions": len(self._blocked),
            "last_error": self.last_error,
        }


def _load_counts(path: Path) -> tuple[int, int, str | None]:
    """(taken, passed, last_pass) as saved; zeros and None for what is missing or wrong."""
    try:
        raw = json.loads(read_regular(path, MAX_COUNTS_BYTES))
    except FileNotFoundError:
        return 0, 0, None
    except (OSError, ValueError, RecursionError) as exc:
        log.warning("ignoring unreadable %s: %s", path, exc)
        return 0, 0, None
    if not isinstance(raw, dict):
        return 0, 0, None
    taken, passed, reason = raw.get("taken"), raw.get("passed"), raw.get("last_pass")
    return (
        _count(taken),
        _count(passed),
        reason[:MAX_REASON_CHARS] if isinstance(reason, str) else None,
    )


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return min(value, 2**53)


def _load(path: Path) -> OrderedDict[str, str]:
    try:
        raw = json.loads(read_regular(path, MAX_RECORD_BYTES))
    except FileNotFoundError:
        return OrderedDict()
    except (OSError, ValueError, RecursionError) as exc:
        log.warning("ignoring unreadable %s: %s", path, exc)
        return OrderedDict()
    blocked = raw.get("blocked") if isinstance(raw, dict) else None
    if not isinstance(blocked, dict):
        return OrderedDict()
    return OrderedDict(
        (k, v)
        for k, v in list(blocked.items())[-MAX_SESSIONS:]
        if isinstance(k, str) and isinstance(v, str) and len(k) <= MAX_ID_CHARS
    )
