"""Every text compaction puts in front of a model: the summary prompt and the messages that
stand in for dropped history. Kept together so the wording can be reviewed in one place."""

from __future__ import annotations

SUMMARY_SYSTEM = (
    "You write hand-over summaries of coding sessions between a user and an AI coding "
    "assistant. Another instance of the assistant will continue the work from your summary "
    "alone, so it must be complete, concrete and accurate. You answer in text only; you have "
    "no tools and must not try to call any."
)

SUMMARY_INSTRUCTIONS = """\
The conversation above is about to be removed from the assistant's context. Write the summary \
that will replace it.

First think in private inside <analysis> ... </analysis>: go through the conversation in \
order and note, for each part, what the user asked for, what the assistant did, which files \
and code were involved, what went wrong and how it was fixed, and any feedback the user gave. \
Check that nothing technical is missing. This scratchpad is thrown away after you finish.

Then write the summary inside <summary> ... </summary> with exactly these nine numbered parts:

1. Primary request and intent: everything the user asked for, with their intent in detail.
2. Key technical concepts: technologies, frameworks, libraries and ideas that matter here.
3. Files and code sections: each file looked at, changed or created; why it matters; the \
important snippets (full code where it was just written or changed).
4. Errors and fixes: each error met and how it was resolved, including what the user said \
about it.
5. Problem solving: problems solved and investigations still under way.
6. All user messages: every message the user wrote that is not a tool result, quoted \
verbatim and in order. Do not paraphrase; these keep the user's exact words.
7. Pending tasks: work the user asked for that is not yet done.
8. Current work: precisely what was being worked on right before this summary, with file \
names and code.
9. Optional next step: the next step, only if it follows directly from the user's most \
recent request and the current work; quote the latest relevant exchange word for word so \
the task is not misread. Leave it out if the last task was finished or nothing was asked.

Write nothing outside the two tags."""

CUSTOM_INSTRUCTIONS_HEADER = "Additional instructions for this summary:"

SUMMARY_PREAMBLE = (
    "This conversation continues an earlier one that no longer fits in the context window. "
    "The summary below describes everything that happened before this point."
)

NOTES_PREAMBLE = (
    "This conversation continues an earlier one that no longer fits in the context window. "
    "The working notes below were kept during the session and describe what happened before "
    "the messages that follow them."
)

CONTINUE_INSTRUCTION = (
    "Carry on with the last task from where it stopped, without asking the user any "
    "questions first and without mentioning this hand-over."
)

SECTION_CUT_MARKER = "[... this section was cut short here; the notes file has all of it.]"

OMITTED_START = "[The start of this conversation is not included here.]"
MISSING_RESULT = "[No result was recorded for this tool call.]"

OMITTED_FOR_RETRY = "[The oldest part of this conversation was left out so the rest fits.]"

IMAGE_PLACEHOLDER = "[image]"
DOCUMENT_PLACEHOLDER = "[document]"

CLEARED_TOOL_RESULT = "[Old tool result cleared to save context. Run the tool again if needed.]"


def transcript_pointer(path: str) -> str:
    return f"Details left out here can be looked up in the full transcript of this session: {path}"


def notes_file_pointer(path: str) -> str:
    return f"The notes file itself is at {path}."
