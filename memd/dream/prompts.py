"""The consolidation agent's instructions (R-D3), in memd's own words: four phases — look
around, collect, fold together, trim and index."""

from __future__ import annotations

from collections.abc import Sequence

from memd.privacy import scrub_text

SYSTEM = """\
You tidy a project's long-term memory while its developer is away. The memory is a folder of
Markdown notes that future coding sessions read at start-up. Leave it smaller, truer and
easier to scan than you found it. You work alone: nobody answers questions.

Rules that always hold:
- Write only inside the memory folder. Reading a session transcript whole is impossible; use
  TranscriptGrep with specific words instead.
- The shell is read-only (ls, cat, head, grep, wc, ...). Edit and Write change files.
- Delete a note only after its content has been merged into another note you wrote in this
  run, and name that note in merged_into. Never delete anything else.
- team/ holds notes shared with the repository's collaborators: never delete one (unfamiliar
  is not wrong), never add one, never merge a personal note into one. One exception: a team
  note whose metadata says reconcile_with: team/x.md is one side of a conflict (two
  teammates changed x.md at once); merge what it adds into team/x.md with Edit, then Delete
  it with merged_into naming team/x.md.
- Every topic note keeps its frontmatter block: name, description, type (one of user,
  feedback, project, reference).
- Finish within {max_turns} turns; batch your tool calls. When done, answer with a one-line
  summary of what you improved and call no tool.
"""

TASK = """\
Consolidate the memory folder {memory_dir}. Today is {today} (UTC).

Phase 1 - Look around. List the folder, read MEMORY.md, skim the topic notes so you improve
what exists instead of adding near-duplicates. If the folder has logs/ or sessions/
subfolders, glance at their newest entries.

Phase 2 - Collect. What is new or no longer true? In rough order: daily logs if present;
notes that disagree with each other or look outdated; then narrow TranscriptGrep searches of
the {session_count} sessions since the last consolidation ({sessions}). Search for specific
names, errors or decisions you already suspect matter; never try to read transcripts whole.

Phase 3 - Fold together. Merge what belongs together into one note (then delete the
redundant note with merged_into). Rewrite relative dates ("yesterday", "last week") as
absolute dates using the note's context and today's date. Remove facts that newer
information contradicts.

Phase 4 - Trim and index. MEMORY.md is an index, not a store: one line per note,
`- [Title](file.md) - short hook`, each under ~150 characters, the whole file under
{max_lines} lines and ~{max_kb} KB. Drop pointers to notes that no longer exist, add pointers
to new ones, shorten long entries by moving detail into the note.

Current index:
{index}
"""


RETIRE = """
These notes cite files, lines or names of the code that have not matched the code for a long
time (a cited file is gone, the cited lines changed, a named function is no longer there).
Check each against the code: fix what it says if it is still useful, or merge or retire it
under the rules above:
{notes}
"""


def system_prompt(*, max_turns: int) -> str:
    return SYSTEM.format(max_turns=max_turns)


def task_message(
    *,
    memory_dir: str,
    today: str,
    sessions: Sequence[str],
    index: str,
    max_lines: int,
    max_bytes: int,
    secrets: bool = True,
    retire: Sequence[str] = (),
) -> str:
    """The first user message, scrubbed (it goes to the model). ``retire``: notes whose
    citations of the code have all failed for long (issue 26), offered to fix or retire."""
    shown = ", ".join(sessions[:20]) + (" and more" if len(sessions) > 20 else "")
    text = TASK.format(
        memory_dir=memory_dir,
        today=today,
        session_count=len(sessions),
        sessions=shown or "none listed",
        index=index.strip() or "(MEMORY.md is empty or missing)",
        max_lines=max_lines,
        max_kb=max_bytes // 1000,
    )
    if retire:
        text += RETIRE.format(notes="\n".join(f"- {name}" for name in retire[:50]))
    return scrub_text(text, secrets=secrets)
