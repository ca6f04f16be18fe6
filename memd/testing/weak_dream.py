"""The scripted weak model's dream (issue 34): it answers a dream asked for one answer
(:mod:`memd.dream.one_answer`) as a small local model would, from what memd showed it.

A good answer merges the notes shown whole whose names start alike (``test command`` and
``testing``) into the first of them, dates a note's "yesterday" (the day before the request's
today), and gives the index a line for every note that remains. A bad one is, by
:data:`DREAM_FAULTS`: cut short at the output limit, not JSON, a path outside the memory dir,
or everything deleted into one note with an empty index.
"""

from __future__ import annotations

import json
import re
from datetime import date, timedelta
from typing import Any

from memd.memory.frontmatter import parse_document
from memd.testing import loopback_replies as replies
from memd.testing.loopback_replies import Reply

DREAM_SYSTEM = "You answer once, with a JSON list of operations on the memory folder"
DREAM_FAULTS = ("cut_short", "invalid_json", "outside", "wipe")
_NOTE = re.compile(r'<note file="([^"\n]+)">\n(.*?)\n</note>', re.S)
_TODAY = re.compile(r"Today is (\d{4}-\d{2}-\d{2})")


def dream_reply(request: str, fault: str | None) -> Reply:
    """The answer to one dream request (its user message), ``fault`` if one is due."""
    notes = dict(_NOTE.findall(request))
    ops = _good(notes, request)
    answer = json.dumps(
        {"summary": "Merged duplicate notes and fixed the index.", "operations": ops}
    )
    first = next(iter(notes), "a.md")
    match fault:
        case "cut_short":
            return replies.text(answer[: len(answer) // 2], stop_reason="max_tokens")
        case "invalid_json":
            return replies.text(answer.replace('"op"', "op", 1)[:-2])
        case "outside":
            text = notes.get(first, "")
            bad = [{"op": "edit", "file": "../../outside.md", "text": text}, *ops]
            return replies.text(json.dumps({"operations": bad}))
        case "wipe":
            deletes = [
                {"op": "delete", "file": name, "merged_into": first} for name in list(notes)[1:]
            ]
            edit = {"op": "edit", "file": first, "text": notes.get(first, "")}
            wipe = [edit, *deletes, {"op": "index", "lines": []}]
            return replies.text(json.dumps({"operations": wipe}))
    return replies.text(f"Here is the plan.\n```json\n{answer}\n```")


def _good(notes: dict[str, str], request: str) -> list[dict[str, Any]]:
    groups: dict[str, list[str]] = {}
    for name, text in notes.items():
        title = parse_document(text).meta.name or name
        groups.setdefault(title.lower()[:4], []).append(name)
    merged = next((names for names in groups.values() if len(names) > 1), [])
    ops: list[dict[str, Any]] = []
    if merged:
        bodies = [parse_document(notes[n]).body.strip() for n in merged[1:]]
        text = notes[merged[0]].rstrip("\n") + "\n" + "\n".join(bodies) + "\n"
        ops.append({"op": "merge", "files": merged, "text": text})
    found = _TODAY.search(request)
    if found is not None:
        yesterday = (date.fromisoformat(found.group(1)) - timedelta(days=1)).isoformat()
        for name, text in notes.items():
            if name not in merged and text.count("yesterday") == 1:
                ops.append(
                    {"op": "edit", "file": name, "old": "yesterday", "new": f"on {yesterday}"}
                )
    gone = set(merged[1:])
    lines = []
    for name, text in notes.items():
        if name not in gone:
            meta = parse_document(text).meta
            lines.append(f"- [{meta.name or name}]({name}) — {meta.description or ''}")
    ops.append({"op": "index", "lines": lines})
    return ops
