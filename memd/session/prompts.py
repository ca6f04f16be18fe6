"""The words of a notes extraction (R-S4): the system prompt and the instruction message.

The instruction is a template with two placeholders, ``{{currentNotes}}`` (the notes as they
are now, already read for the model) and ``{{notesPath}}`` (the one file it may edit). A user
prompt at ``<claude_dir>/session-memory/config/prompt.md`` replaces :data:`DEFAULT_PROMPT`;
the budget reminder (:func:`memd.session.notes.budget_reminder`) is appended to whichever is
used.
"""

from __future__ import annotations

from pathlib import Path

from memd import foreign_reads

MAX_USER_FILE_BYTES = 256 * 1024  # Claude Code's session-memory prompt or template
PROMPT_RELATIVE = Path("session-memory") / "config" / "prompt.md"
NOTES_PLACEHOLDER = "{{currentNotes}}"
PATH_PLACEHOLDER = "{{notesPath}}"

SYSTEM_PROMPT = """\
You keep the working notes of a coding session between a user and an AI coding assistant. \
You are not that assistant and you do not continue its work: you only record what happened \
so that the assistant can pick the work up again after its context is cleared. Your only \
tool is Edit, and it works on exactly one file, the notes file named in the request. You \
never answer the user and never write anything except edits to that file."""

DEFAULT_PROMPT = """\
Update the session notes from the conversation shown above.

The notes file is {{notesPath}}. It has already been read for you; this is all of it:

<current_notes>
{{currentNotes}}
</current_notes>

How to work:
- Use only the Edit tool, and only on {{notesPath}}. Any other tool or file is refused.
- Put all your Edit calls in one reply, then stop. When nothing new is worth recording, \
make no edit and say so in one line.
- old_string must be copied exactly from the notes above, so each edit matches one place.

Rules for the notes:
- Every line starting with "#" and the italic line under it (between underscores) is part \
of the template. Never change, move or delete them; write only in the space below each \
italic line.
- Always bring "Current State" up to date: what is being done now, what is pending, and the \
next step.
- Record errors and how they were fixed, and every correction or preference the user \
stated, under "Errors & Corrections".
- Be specific and brief: file paths, function names, commands, exact error messages, \
figures. No filler, no repetition of what is already written elsewhere in the notes.
- Keep each section under about 2,000 tokens; summarize older detail rather than append \
forever. Never copy secrets, keys or passwords into the notes.
"""


def prompt_path(claude_dir: Path) -> Path:
    return claude_dir / PROMPT_RELATIVE


def load_prompt(path: Path | None) -> str:
    """The user's prompt template at ``path`` if it exists and is not blank, else the default
    (also when it cannot be used: not a regular file, over :data:`MAX_USER_FILE_BYTES`, not
    UTF-8; ``status`` says why, :mod:`memd.foreign_reads`)."""
    if path is None:
        return DEFAULT_PROMPT
    text = foreign_reads.read_text(path, MAX_USER_FILE_BYTES, links="follow")
    return text if text is not None and text.strip() else DEFAULT_PROMPT


def render_prompt(template: str, *, notes: str, notes_path: str, reminder: str = "") -> str:
    """Fill in the placeholders (in one pass, so notes text that happens to contain a
    placeholder is not expanded again) and append the budget reminder."""
    parts = template.split(NOTES_PLACEHOLDER)
    filled = notes.join(part.replace(PATH_PLACEHOLDER, notes_path) for part in parts)
    return filled + reminder
