"""The model selector's pure parts (R-M6): its prompt, and the memory paths read from its answer.

The call itself is :func:`memd.memory.recall`'s, over the LLM client; the candidates it is
shown are the ranker's (:func:`memd.memory.rank.selection_candidates`), and what it picks still
passes :func:`memd.memory.rank.is_tool_usage_reference`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence

from memd.memory.rank import DEFAULT_LIMIT
from memd.memory.scan import MemoryHeader, format_manifest
from memd.privacy import scrub_text

SELECTOR_SYSTEM = """\
You decide which saved memories would help a coding agent with the request in front of it.
You get the request and a catalogue of memory files, one per line: the memory's type, its \
file path, when it was last changed, and a one-line description.

Choose at most {limit} memories that are clearly useful for this request. Choosing none is \
a good answer when nothing fits; do not choose a memory only because it shares a word with \
the request.

If tools in active use are listed, skip reference notes that explain how to use those tools: \
the agent already has working examples of them in its context. Do choose memories that warn \
about those tools: known bugs, gotchas, things that must not be done with them.

Reply with only a JSON array of the chosen file paths, spelled exactly as in the catalogue, \
for example ["feedback_testing.md", "team/deploy.md"]. Reply [] when nothing fits."""


def selector_system(limit: int = DEFAULT_LIMIT) -> str:
    return SELECTOR_SYSTEM.format(limit=limit)


def build_selector_prompt(
    query: str, candidates: Sequence[MemoryHeader], recent_tools: Sequence[str] = ()
) -> str:
    """The user message for the selector: request, tools in use, and the manifest.

    ``candidates`` should already exclude surfaced memories
    (:func:`memd.memory.rank.selection_candidates`).
    Private spans and secrets are scrubbed: this text goes to a model.
    """
    tools = ", ".join(dict.fromkeys(t.strip() for t in recent_tools if t.strip()))
    parts = [f"Request:\n{query.strip()}"]
    if tools:
        parts.append(f"Tools in active use: {tools}")
    parts.append("Memories:\n" + (format_manifest(candidates) or "(none)"))
    return scrub_text("\n\n".join(parts))


_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_MD_PATH = re.compile(r"[\w./~\-]+\.md\b")
_LIST_KEYS = ("memories", "selected_memories", "selected", "paths", "files")


def parse_selection(text: str, known: Collection[str], *, limit: int = DEFAULT_LIMIT) -> list[str]:
    """Known memory paths named by the model's answer, in its order, at most ``limit``.

    Accepts a JSON array (bare, in a code fence, inside prose, or under a key such as
    ``memories``); without JSON, any ``*.md`` paths in the prose. Unknown paths are dropped;
    ``./x.md``, ``memory/x.md`` and absolute paths ending in a known path are recognised.
    """
    named = _json_selection(text)
    if named is None:
        named = _MD_PATH.findall(text)
    chosen: list[str] = []
    for item in named:
        resolved = _resolve(item, known)
        if resolved is not None and resolved not in chosen:
            chosen.append(resolved)
            if len(chosen) >= limit:
                break
    return chosen


def _json_selection(text: str) -> list[str] | None:
    candidates = [*_FENCED.findall(text), text, *_BRACKETS.findall(text)]
    for candidate in candidates:
        try:
            value = json.loads(candidate.strip())
        except ValueError:
            continue
        if isinstance(value, dict):
            value = next((value[k] for k in _LIST_KEYS if isinstance(value.get(k), list)), None)
        if isinstance(value, list):
            return [str(v) for v in value if isinstance(v, str)]
    return None


def _resolve(item: str, known: Collection[str]) -> str | None:
    path = item.strip().strip("`'\"").replace("\\", "/")
    for prefix in ("./", "memory/"):
        path = path.removeprefix(prefix)
    if path in known:
        return path
    tails = [k for k in known if path.endswith("/" + k)]
    if tails:
        return max(tails, key=len)
    if "/" not in path:
        same_name = [k for k in known if k.rsplit("/", 1)[-1] == path]
        if len(same_name) == 1:
            return same_name[0]
    return None
