"""Level 1 compaction (R-C2): the session's working notes stand in for old messages.

Zero API calls. The notes already cover every message up to ``lastSummarizedMessageId``; those
messages are replaced by one user message carrying the notes, and the later ones are kept —
widened backwards until enough recent context survives (token and text-message minimums, under
a hard token cap), then widened again so no tool pair is split. The daemon waits for an
in-flight notes extraction (R-S8) before calling :func:`compact_with_notes`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from memd.compaction import prompts
from memd.compaction.api_form import repair
from memd.compaction.boundaries import CompactBoundary, protect_tool_pairs
from memd.compaction.message import Msg, TokenEstimator, has_text, total_tokens
from memd.compaction.threshold import Trigger
from memd.config import CompactionConfig

FallThroughReason = Literal[
    "no_notes",
    "empty_template",
    "id_not_found",
    "nothing_to_drop",
    "over_threshold",
    "custom_instructions",
]


@dataclass(frozen=True)
class FallThrough:
    """Level 1 cannot serve this compaction; the caller goes on to level 2."""

    reason: FallThroughReason
    detail: str


@dataclass(frozen=True)
class Compacted:
    """The new conversation: the notes message, then the kept messages (API-valid).

    ``cut_index`` is the index in the input of the first kept message; ``boundary`` is the
    compact-boundary marker to record (it is metadata, not an API message).
    """

    messages: tuple[Msg, ...]
    boundary: CompactBoundary
    tokens_before: int
    tokens_after: int
    cut_index: int
    kept_count: int
    truncated_sections: tuple[str, ...]


SessionMemoryOutcome = Compacted | FallThrough


def compact_with_notes(
    msgs: Sequence[Msg],
    *,
    notes: str | None,
    template: str,
    last_summarized_uuid: str | None,
    threshold: int,
    cfg: CompactionConfig,
    estimate: TokenEstimator,
    trigger: Trigger = "auto",
    notes_path: str | None = None,
    transcript_path: str | None = None,
) -> SessionMemoryOutcome:
    """Compact ``msgs`` with the session notes, or say why level 1 does not apply.

    ``last_summarized_uuid`` None means the notes exist but no cut point was recorded (a
    resumed session): every message counts as covered and only the minimums are kept.
    ``threshold`` is the auto-compaction threshold; a result at or above it falls through.
    """
    if notes is None or not notes.strip():
        return FallThrough("no_notes", "the session has no notes yet")
    if _normalized(notes) == _normalized(template):
        return FallThrough("empty_template", "the notes are still the empty template")
    covered = covered_end(msgs, last_summarized_uuid)
    if covered is None:
        return FallThrough(
            "id_not_found", f"last summarized message {last_summarized_uuid} is not in context"
        )
    start = protect_tool_pairs(msgs, keep_start(msgs, covered, cfg))
    if start == 0:
        return FallThrough("nothing_to_drop", "every message would be kept")
    text, cut = truncate_sections(notes, cfg.section_max_chars)
    body = notes_message_text(text, bool(cut), trigger, notes_path, transcript_path)
    notes_msg = Msg.of("user", body, tokens=estimate(body))
    kept = msgs[start:]
    result = repair([notes_msg, *kept])
    before, after = total_tokens(msgs), total_tokens(result)
    if after >= threshold:
        return FallThrough(
            "over_threshold", f"{after} tokens after compaction, threshold is {threshold}"
        )
    boundary = CompactBoundary(trigger, before, 1, msgs[-1].uuid)
    return Compacted(tuple(result), boundary, before, after, start, len(kept), cut)


def covered_end(msgs: Sequence[Msg], uuid: str | None) -> int | None:
    """Index just past the last message the notes cover; None if the uuid is unknown.

    A uuid naming an earlier line of a message that grew since (a response still streaming
    when the notes were written) covers only the messages before it.
    """
    if uuid is None:
        return len(msgs)
    for i in range(len(msgs) - 1, -1, -1):
        if msgs[i].uuid == uuid:
            return i + 1
        if uuid in msgs[i].line_uuids:
            return i
    return None


def keep_start(msgs: Sequence[Msg], covered_end: int, cfg: CompactionConfig) -> int:
    """First message to keep before tool-pair protection.

    Starts just after the covered messages and moves back one message at a time until the
    kept ones reach ``keep_max_tokens`` (the hard cap wins, and the message that crosses it is
    kept), or reach both ``keep_min_tokens`` and ``keep_min_text_messages``.
    """
    start = covered_end
    tokens = total_tokens(msgs[start:])
    texts = sum(1 for m in msgs[start:] if has_text(m))

    def enough() -> bool:
        if tokens >= cfg.keep_max_tokens:
            return True
        return tokens >= cfg.keep_min_tokens and texts >= cfg.keep_min_text_messages

    while start > 0 and not enough():
        start -= 1
        tokens += msgs[start].tokens
        texts += has_text(msgs[start])
    return start


def _normalized(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


def truncate_sections(notes: str, max_chars: int) -> tuple[str, tuple[str, ...]]:
    """Cut every ``# `` section whose body is longer than ``max_chars`` characters.

    A cut section keeps its header and whole lines up to the limit (a single longer line is
    cut inside), followed by a marker saying it was shortened. Returns the text and the
    headers of the sections that were cut.
    """
    out: list[str] = []
    cut: list[str] = []
    for header, body in _sections(notes):
        if len(body) > max_chars:
            body = _shorten(body, max_chars) + "\n" + prompts.SECTION_CUT_MARKER
            cut.append(header.strip() or "(before the first section)")
        out.append(header + body)
    return "\n".join(out), tuple(cut)


def _sections(notes: str) -> list[tuple[str, str]]:
    """(header line with its newline, body) pairs; the text before any header has header ''."""
    sections: list[tuple[str, list[str]]] = [("", [])]
    fenced = False
    for line in notes.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if line.startswith("# ") and not fenced:
            sections.append((line + "\n", []))
        else:
            sections[-1][1].append(line)
    pairs = [(h, "\n".join(lines)) for h, lines in sections]
    if pairs[0] == ("", "") and len(pairs) > 1:
        pairs = pairs[1:]
    return pairs


def _shorten(body: str, max_chars: int) -> str:
    kept: list[str] = []
    used = 0
    for line in body.split("\n"):
        if used + len(line) + 1 > max_chars:
            if not kept:
                kept.append(line[:max_chars])
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join(kept).rstrip()


def notes_message_text(
    notes: str,
    cut: bool,
    trigger: Trigger,
    notes_path: str | None,
    transcript_path: str | None,
) -> str:
    """The user message that carries the notes into the new conversation."""
    parts = [prompts.NOTES_PREAMBLE, f"<session-notes>\n{notes.strip()}\n</session-notes>"]
    if cut and notes_path:
        parts.append(prompts.notes_file_pointer(notes_path))
    if transcript_path:
        parts.append(prompts.transcript_pointer(transcript_path))
    if trigger == "auto":
        parts.append(prompts.CONTINUE_INSTRUCTION)
    return "\n\n".join(parts)
