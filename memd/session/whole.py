"""Notes by the whole-answer protocol (issue 34): for a model that cannot drive the Edit tool
loop (a small local model, an agent CLI run headless), the notes are asked for as the whole
new text, one call per chunk, and memd checks it before it replaces the file.

The answer must be the complete notes between ``<notes>`` and ``</notes>``. It replaces the
notes only if every check holds (:func:`check_answer`, pure):

* it is whole: the closing tag is there and the model did not stop at its output limit;
* it keeps the template: every header and description line, unchanged and in order;
* it keeps within the budgets, or at least does not grow past them: the file over
  ``total_tokens`` (or a section over twice ``section_tokens``) only if smaller than before;
* it keeps what the notes held: a protected section that had content still has some, and the
  notes do not lose most of their text at once (a model that forgot them, or cut short).

A failed check changes nothing and raises :class:`memd.errors.MalformedAnswer`, which parks
the job (tried again after its back-off, never at once) and is counted in ``status``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from memd.agent.runner import AgentSpec, ask_once
from memd.errors import MalformedAnswer
from memd.llm.client import LLM, LLMReply, Usage
from memd.llm.ledger import Ledger
from memd.privacy import scrub_text
from memd.session import inputs, notes
from memd.session.template import Broken, Intact, check_skeleton, parse_sections
from memd.tokens import estimate_text

OPEN, CLOSE = "<notes>", "</notes>"
KEEP_AT_LEAST = 1 / 3  # of the previous notes' text, when they were within budget

SYSTEM_PROMPT = """\
You keep the working notes of a coding session between a user and an AI coding assistant. \
You are not that assistant and you do not continue its work: you only record what happened \
so that the assistant can pick the work up again after its context is cleared. You answer \
with the complete, updated notes file and nothing else."""

PROMPT = """\
Update the session notes from the conversation shown above.

These are the notes as they are now:

<current_notes>
{{currentNotes}}
</current_notes>

Answer with the whole updated notes file between <notes> and </notes>, and nothing else.

Rules:
- Copy every line starting with "#" and the italic line under it (between underscores) \
exactly as it is, in the same order. Write only in the space below each italic line.
- Keep what is still true from the current notes; add what is new; correct what changed.
- Always bring "Current State" up to date: what is being done now, what is pending, and the \
next step. Record errors and their fixes, and what the user corrected, under \
"Errors & Corrections".
- Be specific and brief: file paths, function names, commands, exact error messages. Keep \
each section under about 2,000 tokens; summarize older detail rather than append forever.
- Never copy secrets, keys or passwords into the notes.
"""


@dataclass(frozen=True)
class Answered:
    text: str
    usage: Usage


def instruction(current: str, reminder: str) -> str:
    """The words after the conversation (the budget reminder appended)."""
    return PROMPT.replace("{{currentNotes}}", current) + reminder


def notes_of(reply: LLMReply) -> str:
    """The notes text of an answer, or :class:`MalformedAnswer` when it is not whole."""
    if reply.cut_short:
        raise MalformedAnswer("the notes answer was cut short at the output limit; unchanged")
    text = reply.text
    start, end = text.find(OPEN), text.rfind(CLOSE)
    if start < 0 or end < start:
        raise MalformedAnswer("the answer held no complete <notes>…</notes>; notes unchanged")
    body = text[start + len(OPEN) : end]
    return body.strip("\n") + "\n"


def check_answer(
    before: str, after: str, template: str, section_limit: int, total_limit: int
) -> str | None:
    """Why ``after`` must not replace ``before`` (pure; see the module docstring)."""
    reference = template if isinstance(check_skeleton(before, template), Intact) else before
    match check_skeleton(after, reference):
        case Broken(problems=problems):
            return "it changed the template: " + "; ".join(problems[:3])
        case Intact():
            pass
    old, new = _sizes(before, reference), _sizes(after, reference)
    total_old, total_new = estimate_text(before), estimate_text(after)
    if total_new > total_limit and total_new > total_old:
        return f"it grew to ~{total_new} tokens, over the {total_limit}-token budget"
    for name, size in new.items():
        if size > 2 * section_limit and size > old.get(name, 0):
            return f'section "{name}" grew to ~{size} tokens, over twice its budget'
    for name in notes.PROTECTED_SECTIONS:
        if old.get(name, 0) > 0 and new.get(name, 0) == 0:
            return f'it emptied "{name}"'
    body_old, body_new = sum(old.values()), sum(new.values())
    if total_old <= total_limit and body_old > 200 and body_new < body_old * KEEP_AT_LEAST:
        return f"it dropped most of the notes (~{body_old} -> ~{body_new} tokens)"
    return None


def _sizes(text: str, template: str) -> dict[str, int]:
    return {s.name: estimate_text(s.body.strip()) for s in parse_sections(text, template)}


async def run_chunk(
    llm: LLM,
    spec: AgentSpec,
    chunk: inputs.Chunk,
    path: Path,
    *,
    template: str,
    before: str,
    reminder: str,
    section_limit: int,
    total_limit: int,
    secrets: bool,
    ledger: Ledger,
) -> Usage:
    """One chunk: ask, check, replace the notes (atomically) or raise ``MalformedAnswer``."""
    request = inputs.delta_request(chunk, instruction(before, reminder), secrets=secrets)
    reply = await ask_once(llm, spec, request.messages, ledger=ledger)
    after = scrub_text(notes_of(reply), secrets=secrets)
    problem = await anyio.to_thread.run_sync(
        check_answer, before, after, template, section_limit, total_limit
    )
    if problem is not None:
        raise MalformedAnswer(f"the new notes were refused: {problem}; notes unchanged")
    if after != before:
        await anyio.to_thread.run_sync(notes.write_notes, path, after)
    return reply.usage
