"""The words of a background memory extraction (R-M3): system prompt and request message.

The extraction agent is not the coding assistant. It reads the part of a conversation that
no extraction has seen yet and keeps the project's memory dir up to date: topic files with
frontmatter (``name``, ``description``, ``type``) and the ``MEMORY.md`` index. What it is
told, in short:

* the four memory types and what belongs in each;
* what never to store: anything the code or the git history already says, passing task
  state, secrets and text that was redacted or marked private;
* the file format and the index format, and to update an existing memory rather than add a
  near duplicate;
* to finish in few turns: read everything it needs in one turn, write everything in the
  next, then stop.

The request already carries the memory dir's catalogue and its index, so an agent that only
adds a memory needs no read turn at all. :func:`build_request` assembles it: the new part of
the conversation redacted (:func:`memd.privacy.scrub_messages`: ``<private>`` spans, likely
secrets), images and documents as placeholders and long tool inputs and results cut
(:func:`memd.session.inputs.render_message`), at most :data:`MAX_TRANSCRIPT_CHARS` of it with
the newest messages kept; then the instruction. Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memd.memory.frontmatter import FrontmatterForm
from memd.memory.index import ENTRY_MAX_CHARS
from memd.memory.paths import INDEX_FILENAME
from memd.privacy import scrub_messages, scrub_text
from memd.session.inputs import cut, render_message
from memd.transcript.messages import ApiMessage

MAX_TRANSCRIPT_CHARS = 150_000

SYSTEM_PROMPT = """\
You maintain the long-term memory of an AI coding assistant. The assistant works with a \
user on one project across many separate conversations, and it starts each conversation \
knowing nothing except what is in this memory. You are not that assistant: you never \
answer the user and never continue the work. You read a piece of a conversation and \
decide what, if anything, is worth remembering next time, then record it in the memory \
directory.

Memory types (the `type` of each memory file):
- user: who the user is — role, expertise, responsibilities, how they like to work \
together. Only what helps the assistant work with this person.
- feedback: guidance the user gave about how to do the work — corrections ("don't do X"), \
and approaches the user confirmed. Say what to do and why, so it can be applied to cases \
that are not the exact same.
- project: facts about the ongoing work that the code does not show — goals, decisions and \
their reasons, constraints, deadlines, incidents, who owns what. Write dates as absolute \
dates (2025-03-14), never "yesterday" or "next week".
- reference: where to find things outside the repository — dashboards, ticket trackers, \
runbooks, documents, useful external commands and the gotchas of using them.

Never store:
- anything that can be read from the code, the files, the configuration or the git \
history: code structure, file layouts, conventions visible in the code, what a recent \
commit changed, how a bug was fixed (the fix is in the code);
- the state of the task at hand, progress reports, or anything that only matters in this \
conversation;
- secrets of any kind: keys, tokens, passwords, private keys, connection strings with \
credentials. Text shown as [REDACTED:…] or [private] was withheld on purpose: never try to \
reconstruct or mention it;
- guesses. Record what the user said or what was clearly established, nothing more.

Most conversations contain nothing worth remembering. Saving nothing is a good outcome.

Format of a memory file (one topic per file, Markdown, named like `feedback_testing.md`):

---
name: A short title
description: One line that says what this memory is about, specific enough to decide \
from it alone whether the memory is relevant to a task
{type_lines}
---

The memory itself: short, factual, self-contained.

MEMORY.md is the index. It has one line per memory file and nothing else of substance:
- [Title](file_name.md) — one-line hook
Keep every index line under about {entry_chars} characters and the whole index well under \
200 lines. When you add a memory file, add its index line; when you change what a memory \
is about, update its line. Prefer updating an existing memory over creating a second one \
on the same topic, and correct a memory that the conversation shows to be wrong.

How to work — you have at most {max_turns} turns, so be quick:
1. The request lists every existing memory and shows the current index. If you need to \
see the full text of existing memories before changing them, read all of them at once, \
in a single turn (several Read calls in one reply).
2. Then make all your changes at once, in a single turn: several Write and Edit calls in \
one reply (topic files and MEMORY.md together).
3. Then stop, with one short line saying what you saved, or "Nothing to save."

Tools: Read, Grep and Glob work inside the memory directory; Shell runs read-only \
commands there; Write and Edit work only on files inside the memory directory. Nothing \
outside it can be read or changed, and nothing can be deleted."""


INSTRUCTION = """\
Above is the part of the conversation that has not been reviewed for memories yet. \
Today is {today}.

The memory directory is {memory_dir}. Relative file paths are taken from there.

Memory files that exist now (type, path, last change, description):
<existing_memories>
{manifest}
</existing_memories>

The index, {index_path}, as it is now:
<memory_index>
{index}
</memory_index>

Decide what in the new part of the conversation deserves to be remembered in future \
conversations, following your instructions, and record it. If nothing does, reply \
"Nothing to save." without calling any tool."""


TYPE_LINES: dict[FrontmatterForm, str] = {
    "top-level": "type: user | feedback | project | reference",
    "metadata": "metadata:\n  type: user | feedback | project | reference",
}


def system_prompt(*, max_turns: int, form: FrontmatterForm = "metadata") -> str:
    """The extraction agent's system prompt for a run of at most ``max_turns`` turns."""
    return SYSTEM_PROMPT.format(
        max_turns=max_turns, entry_chars=ENTRY_MAX_CHARS, type_lines=TYPE_LINES[form]
    )


def guidance(*, form: FrontmatterForm = "metadata") -> str:
    """The system prompt's guidance on what to remember, without its tools and turns (the
    whole-answer protocol, :mod:`memd.memory.operations`, has neither)."""
    return system_prompt(max_turns=1, form=form).split("\n\nHow to work")[0]


def instruction(*, memory_dir: str, index_path: str, manifest: str, index: str, today: str) -> str:
    """The text after the conversation: where the memories are and what they are now."""
    return INSTRUCTION.format(
        today=today,
        memory_dir=memory_dir,
        index_path=index_path,
        manifest=manifest.strip() or "(none yet)",
        index=index.strip() or "(MEMORY.md does not exist yet)",
    )


CONVERSATION_HEAD = "<conversation>\n[New since the last memory review]"
CONVERSATION_TAIL = "</conversation>"
OMITTED_NOTE = (
    "[{n} older message(s) of this part were left out to keep the request small; "
    "the newest ones follow]"
)


def conversation_text(rendered: list[str], omitted: int) -> str:
    """Rendered messages (oldest first) inside the conversation markers."""
    parts = [CONVERSATION_HEAD]
    if omitted:
        parts.append(OMITTED_NOTE.format(n=omitted))
    parts.extend(text for text in rendered if text)
    parts.append(CONVERSATION_TAIL)
    return "\n".join(parts)


def render_new(
    messages: Sequence[ApiMessage], *, secrets: bool = True, max_chars: int = MAX_TRANSCRIPT_CHARS
) -> str:
    """The new part as conversation text: redacted, cut, the newest ``max_chars`` kept."""
    redacted = scrub_messages([m.to_api() for m in messages], secrets=secrets)
    rendered = [
        render_message(ApiMessage(m.role, r["content"], m.uuids), secrets=secrets)
        for m, r in zip(messages, redacted, strict=True)
    ]
    kept: list[str] = []
    size = 0
    for text in reversed(rendered):
        if kept and size + len(text) > max_chars:
            break
        kept.append(cut(text, max_chars))
        size += len(text)
    kept.reverse()
    return conversation_text(kept, len(rendered) - len(kept))


def build_request(
    new: Sequence[ApiMessage],
    *,
    memory_dir: str,
    manifest: str,
    index: str,
    today: str,
    secrets: bool = True,
) -> list[dict[str, Any]]:
    """The run's one user message: the new part, then the instruction (both scrubbed)."""
    text = instruction(
        memory_dir=memory_dir,
        index_path=str(Path(memory_dir) / INDEX_FILENAME),
        manifest=manifest,
        index=index,
        today=today,
    )
    content = [
        {"type": "text", "text": render_new(new, secrets=secrets)},
        {"type": "text", "text": scrub_text(text, secrets=secrets)},
    ]
    return [{"role": "user", "content": content}]
