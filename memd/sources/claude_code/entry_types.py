"""Every line ``type`` Claude Code writes into a transcript, by name (FORMAT.md §3).

Conversation lines (``user``, ``assistant``, ``system``, ``progress``, ``attachment``) become
entries (:mod:`memd.transcript.parse`); the rest are bookkeeping memd does not need, skipped
here by name. The list is Claude Code's own: the table its transcript writer routes every
entry by (2.1.331: ``appendEntry``; 2.1.197 wrote the ``speculation-accept`` and
``marble-origami-*`` types that 2.1.331 no longer does), so a rare type is known too.
What 2.1.331 writes that 2.1.197 did not, read from real sessions against a loopback model:

* ``api-request-shape`` (~39 KB: the request's system prompt and tools), ``api-request-blob``
  (one message of a request, by hash), ``api-request`` (its parameters and the hashes of its
  messages), ``api-request-resumed``: the record Claude Code replays a request from. None
  has a ``uuid``: they never enter the conversation, and the messages they repeat are
  already there as ``user``/``assistant`` lines.
* ``atis-latch``, ``tools-used``, ``cost-state`` (the session's running cost), ``mode``,
  ``last-prompt``: state, last one wins.
* Attachments (conversation lines, kept as links): ``prompt_snapshot`` (the system prompt,
  up to ~60 KB, which an assistant line names as its parent), ``instructions`` (the
  CLAUDE.md files and the auto-memory ``MEMORY.md``, with their paths), ``environment``,
  ``model``, ``date``, ``session_context``, ``remote_session_change``; and ``system`` lines
  with subtype ``stop_hook_summary`` in ``-p`` runs, a turn end
  (:data:`~memd.transcript.model.TURN_END_SUBTYPES`).

A type not listed here is counted per session
(:meth:`~memd.transcript.conversation.Conversation.count_unknown`), so the next format
change shows up in ``session`` and ``status`` rather than as a wrong figure.
"""

from __future__ import annotations

from typing import Final

CONVERSATION: Final = frozenset({"user", "assistant", "system", "progress", "attachment"})

BOOKKEEPING: Final = frozenset(
    {
        "summary",
        "custom-title",
        "ai-title",
        "tag",
        "agent-name",
        "agent-color",
        "agent-setting",
        "last-prompt",
        "ended-by-model",
        "continued-in",
        "relocated",
        "derived-from",
        "pr-link",
        "frame-link",
        "observer-ref",
        "fork-context-ref",  # a forked sub-agent's context lives in its parent's file
        "resume-head-vouch",
        "bridge-session",
        "history-suppression",
        "file-history-snapshot",
        "file-history-delta",
        "attribution-snapshot",
        "content-replacement",
        "data-flow-records",
        "data-flow-incomplete",
        "artifact-comment-monitor",
        "artifact-autoreact-ledger",
        "mode",
        "permission-mode",
        "memory-mode",
        "isolation-latch",
        "session-owner",
        "dev-mods",
        "atis-latch",
        "tools-used",
        "worktree-state",
        "cost-state",
        "queue-operation",
        "api-request",
        "api-request-shape",
        "api-request-blob",
        "api-request-resumed",
        "repl-mode",
        "hybrid-organization",
        "host-row",
        # 2.1.197 and before
        "speculation-accept",
        "marble-origami-commit",
        "marble-origami-snapshot",
        "marble-origami-reset",
    }
)

KNOWN: Final = CONVERSATION | BOOKKEEPING
