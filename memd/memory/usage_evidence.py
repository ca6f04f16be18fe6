"""Did an agent use a memory it was given? The evidence in its own transcript (pure; issue 36).

A memory in an agent's context (injected by memd's hook, served by its MCP ``recall``) is
*used* when the agent's own side of the conversation after it shows so, strongest first:

* ``cited`` — a citation tag in a reply names the memory's file (Codex's
  ``<oai-mem-citation>``: the agent's room says how its tag reads, :attr:`Rules.citations`);
* ``read_over_mcp`` — the agent called memd's ``read_memory`` for it;
* ``opened_memory`` — a tool call opened the memory's own file;
* ``opened_cited`` — a tool call opened a file the memory cites (its ``citations``, or the
  paths its text names);
* ``quoted`` — a reply holds a code span of the memory (``make ship``) or a run of
  :data:`QUOTE_WORDS` of its words;
* ``paraphrased`` — a reply holds enough of the memory's distinctive terms (stemmed, no
  stopwords): :data:`PARAPHRASE_TERMS`, or :data:`PARAPHRASE_SHARE` of them.

What the others said in the window (the user's prompts, tool results, memd's own injected
text left out) does not count: a reply that repeats the prompt's words or a file the agent
just read used neither the memory nor its text. What differs between agents (how a tool call
that opens a file reads, what memd's MCP tools are called there, a citation tag, tool calls
written into the reply's text) is the agent's :class:`Rules`, kept in its room
(``memd/sources/<agent>/usage.py``); :func:`steps_of` turns any agent's messages (the common
Messages-API shape every reader produces) into :class:`Step` by them.

Everything here reads hostile text: bounded (:data:`MAX_WORDS_CHARS` of a window's words,
:data:`MAX_CALLS` calls, :data:`MAX_ARG_CHARS` of an argument) and never raises.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from memd.mcp.render import served_files
from memd.memory.remember import name_key
from memd.memory.session_context import INDEX_MARK, NOTES_MARK, RECALL_MARK
from memd.memory.terms import STOPWORDS, analyze
from memd.sources.usage import MAX_CALLS, Call, Rules

Signal = Literal["cited", "read_over_mcp", "opened_memory", "opened_cited", "quoted", "paraphrased"]
SIGNALS: tuple[Signal, ...] = (
    "cited",
    "read_over_mcp",
    "opened_memory",
    "opened_cited",
    "quoted",
    "paraphrased",
)
QUOTE_WORDS = 6  # a run of this many of the memory's words, in order, is a quote
MIN_SPAN_CHARS = 4  # a code span shorter than this (`ls`) says nothing
PARAPHRASE_TERMS = 4  # distinctive terms of the memory in a reply: used whatever its length
PARAPHRASE_SHARE = 0.5  # ... or this share of them, when there are at least three
MIN_PARAPHRASE_TERMS = 3
MAX_WORDS_CHARS = 200_000  # of a window's words, each side
MAX_ARG_CHARS = 16_384
MAX_PATHS_PER_CALL = 64
_MARKS = (INDEX_MARK, NOTES_MARK, RECALL_MARK)
_SPAN = re.compile(r"`([^`\n]{1,200})`")
_WORD = re.compile(r"[^\W_]+(?:['_\-][^\W_]+)*")
_ESCAPES = re.compile(r"\\[nrt]")
_SHELL_SPLIT = re.compile(r"\s*(?:&&|\|\||;|\||\n)\s*")


@dataclass(frozen=True)
class Step:
    """One message of a window: whose it is, the words it holds (memd's injected text left
    out), its tool calls, and the memory files memd's MCP tools served in it (a ``recall``
    or ``read_memory`` answer, as its text names them: relative to the memory dir)."""

    role: Literal["user", "assistant"]
    words: str
    calls: tuple[Call, ...] = ()
    served: tuple[str, ...] = ()


@dataclass(frozen=True)
class Watched:
    """A memory in the agent's context: what its use would look like. ``path`` is absolute;
    ``cited`` are the files it cites, relative to the project's root."""

    path: str
    relative: str
    name: str
    text: str
    cited: tuple[str, ...] = ()


@dataclass(frozen=True)
class Places:
    """Where the session works: relative paths in tool calls are taken from ``cwd``; cited
    files are below ``root``."""

    cwd: str
    root: str


# ---------------------------------------------------------------------------------------------
# Messages into steps


def steps_of(
    messages: Iterable[tuple[str, Sequence[Mapping[str, Any]]]], rules: Rules
) -> list[Step]:
    """``(role, content blocks)`` of messages in the common shape, as :class:`Step` by the
    agent's ``rules``: text blocks are words (a block holding memd's injected text is not),
    ``tool_use`` blocks are calls (an argument string of JSON decoded), tool results are the
    others' words, except memd's own answers, whose memories are ``served``."""
    steps: list[Step] = []
    for role, blocks in messages:
        taken = _Taken()
        for block in blocks:
            _take(block, role, rules, taken)
        side: Literal["user", "assistant"] = "assistant" if role == "assistant" else "user"
        words = "\n".join(taken.words)
        steps.append(Step(side, words, tuple(taken.calls[:MAX_CALLS]), tuple(taken.served)))
    return steps


@dataclass
class _Taken:
    words: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    served: list[str] = field(default_factory=list)


def _take(block: Mapping[str, Any], role: str, rules: Rules, taken: _Taken) -> None:
    kind = block.get("type")
    text: object = None
    if kind == "text":
        text = block.get("text")
        if not isinstance(text, str) or any(mark in text for mark in _MARKS):
            return
        if role == "assistant" and rules.calls_in_text is not None:
            text, found = rules.calls_in_text(text)
            taken.calls.extend(found)
        elif role != "assistant" and rules.user_words is not None:
            text = rules.user_words(text)
    elif kind == "tool_use" and isinstance(block.get("name"), str):
        taken.calls.append(Call(block["name"], decoded_args(block.get("input"))))
    elif kind == "tool_result":
        text = result_text(block.get("content"))
    if not isinstance(text, str):
        return
    served = served_files(text) if role != "assistant" else ()
    if served:
        taken.served.extend(served)
    else:
        taken.words.append(text)


def decoded_args(given: object) -> Mapping[str, Any]:
    """A tool call's arguments: the object itself, or the JSON object an ``arguments``
    string holds (how the other agents' readers keep them); ``{}`` for anything else."""
    if not isinstance(given, Mapping):
        return {}
    raw = given.get("arguments")
    if len(given) == 1 and isinstance(raw, str):
        try:
            value = json.loads(raw[:MAX_ARG_CHARS])
        except (ValueError, RecursionError):
            return {}
        return value if isinstance(value, dict) else {}
    return given


def result_text(content: object) -> str:
    """A tool result's text (a string, or the text blocks of a list)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text") for b in content if isinstance(b, Mapping)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


# ---------------------------------------------------------------------------------------------
# Judging


def evidence(
    memory: Watched, window: Sequence[Step], rules: Rules, places: Places
) -> Signal | None:
    """The strongest sign that the agent used ``memory`` in ``window`` (the steps after it
    entered the context), or None."""
    replies = [s for s in window if s.role == "assistant"]
    if not replies:
        return None
    calls = [c for s in replies for c in s.calls][:MAX_CALLS]
    said = _bounded(s.words for s in replies)
    if rules.citations is not None and any(
        names_memory(cited, memory) for cited in rules.citations(said)
    ):
        return "cited"
    if any(memory_read(call, rules, memory) for call in calls):
        return "read_over_mcp"
    opened = [os.path.normpath(p) for c in calls for p in opened_paths(c, rules, places.cwd)]
    if os.path.normpath(memory.path) in opened:
        return "opened_memory"
    if any(_is_cited(path, memory.cited, places.root) for path in opened):
        return "opened_cited"
    others = _bounded(s.words for s in window if s.role == "user")
    return said_again(memory.text, said, others)


def said_again(memory: str, said: str, others: str) -> Signal | None:
    """``quoted`` or ``paraphrased`` when the agent's words ``said`` repeat ``memory`` in a
    way the others' words (``others``) do not explain, else None."""
    for span in _SPAN.findall(memory):
        span = span.strip()
        if len(span) >= MIN_SPAN_CHARS and _wordy(span) and span in said and span not in others:
            return "quoted"
    runs = _runs(_words(memory)) - _runs(_words(others))
    if runs and not runs.isdisjoint(_runs(_words(said))):
        return "quoted"
    distinct = set(analyze(memory)) - set(analyze(others)) - STOPWORDS
    hits = len(distinct & set(analyze(said)))
    if hits < MIN_PARAPHRASE_TERMS:
        return None
    if hits >= PARAPHRASE_TERMS or hits >= PARAPHRASE_SHARE * len(distinct):
        return "paraphrased"
    return None


def _bounded(texts: Iterable[str]) -> str:
    return "\n".join(texts)[:MAX_WORDS_CHARS]


def _wordy(span: str) -> bool:
    """A span with at least one letter or digit (a run of punctuation says nothing)."""
    return any(ch.isalnum() for ch in span)


def _words(text: str) -> list[str]:
    """The words of ``text`` (a tool's JSON-escaped output, as Gemini keeps it, too)."""
    return [w.casefold() for w in _WORD.findall(_ESCAPES.sub(" ", text))]


def _runs(words: Sequence[str]) -> set[tuple[str, ...]]:
    """Every run of :data:`QUOTE_WORDS` words that is not all stopwords."""
    runs = (tuple(words[i : i + QUOTE_WORDS]) for i in range(len(words) - QUOTE_WORDS + 1))
    return {run for run in runs if not all(w in STOPWORDS for w in run)}


def memory_read(call: Call, rules: Rules, memory: Watched) -> bool:
    """Whether ``call`` is memd's MCP ``read_memory`` of ``memory`` (by its file or name)."""
    if call.name not in rules.mcp_read:
        return False
    wanted = call.args.get("name")
    if not isinstance(wanted, str) or not wanted.strip():
        return False
    return names_memory(wanted, memory) or (
        bool(memory.name) and name_key(wanted[:MAX_ARG_CHARS]) == name_key(memory.name)
    )


def names_memory(given: str, memory: Watched) -> bool:
    """Whether ``given`` (a file as an agent wrote it) is ``memory``'s file: its absolute
    path, its path relative to the memory dir, or a path ending in that."""
    given = given.strip()[:MAX_ARG_CHARS]
    if not given:
        return False
    normal = os.path.normpath(given)
    relative = os.path.normpath(memory.relative)
    return (
        normal == os.path.normpath(memory.path)
        or normal == relative
        or normal.endswith("/" + relative)
    )


def opened_paths(call: Call, rules: Rules, cwd: str) -> list[str]:
    """The files ``call`` opens, absolute (relative ones taken from ``cwd``)."""
    found: list[str] = []
    for key in rules.file_args.get(call.name, ()):
        found += _strings(call.args.get(key))
    shell = rules.shell_args.get(call.name)
    if shell is not None:
        found += command_paths(call.args.get(shell))
    return [_absolute(p, cwd) for p in found[:MAX_PATHS_PER_CALL] if p]


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value[:MAX_ARG_CHARS]]
    if isinstance(value, list):
        return [v[:MAX_ARG_CHARS] for v in value[:MAX_PATHS_PER_CALL] if isinstance(v, str)]
    return []


def command_paths(command: object) -> list[str]:
    """The words of a command line that may name files (options left out): a string, or
    argv as a list (``["bash", "-lc", "cat x"]`` is read through its script)."""
    if isinstance(command, list):
        argv = _strings(command)
        if (
            len(argv) >= 3
            and argv[-2] in ("-c", "-lc")
            and os.path.basename(argv[0])
            in (
                "bash",
                "sh",
                "zsh",
            )
        ):
            return command_paths(argv[-1])
        return [w for w in argv[1:] if not w.startswith("-")]
    if not isinstance(command, str):
        return []
    words: list[str] = []
    for part in _SHELL_SPLIT.split(command[:MAX_ARG_CHARS]):
        try:
            argv = shlex.split(part)
        except ValueError:
            argv = part.split()
        words += [w for w in argv[1:] if not w.startswith("-") and not w.startswith(">")]
    return words[:MAX_PATHS_PER_CALL]


def _absolute(path: str, cwd: str) -> str:
    path = path.strip()
    if path.startswith("file://"):
        path = path[len("file://") :]
    if os.path.isabs(path) or not cwd:
        return path
    return os.path.join(cwd, path)


def _is_cited(path: str, cited: Sequence[str], root: str) -> bool:
    """Whether ``path`` (absolute, normalised) is one of the ``cited`` files (relative to
    ``root``; when the root is unknown, a path ending in the cited one)."""
    for file in cited:
        normal = os.path.normpath(file)
        if root and path == os.path.normpath(os.path.join(root, normal)):
            return True
        if not root and (path == normal or path.endswith("/" + normal)):
            return True
    return False
