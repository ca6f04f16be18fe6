"""A line's bytes as an agent written in JavaScript reads them (Claude Code, Gemini CLI).

Node decodes a file's bytes with each invalid UTF-8 sequence as U+FFFD; ``JSON.parse`` takes
a lone UTF-16 surrogate escape (``"\\ud83d"``, an emoji cut in half) and a number past a
float's range (``1e999``, Infinity, written back as null). The transcript parser
(:mod:`memd.transcript.parse`), the compaction fork and the other agents' readers
(:mod:`memd.sources.common`) read lines the same way through these, so what one of them
accepts another never refuses.

One rule for a number past a float's range, in every agent's reader: where memd only passes
a value on (content) it is what the agent makes of it (null); in a field memd reads (a token
count, an id, a flag) the line is bad (:func:`past_range`, :func:`refused`), as for any
number out of ``0 … MAX_NUMBER``: an Infinity is no figure, and ``input_tokens: 1e400`` read
as absent made a session's context the rest of its usage.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Final

import msgspec


class BadLine(ValueError):
    """A transcript line that cannot become an entry; the tailer counts it and moves on."""


def as_node_reads(line: bytes) -> bytes:
    """``line`` with each invalid UTF-8 sequence made U+FFFD, as Node decodes a file (Claude
    Code, and Gemini CLI's ``readline`` over its chat file; a sequence is never longer than
    its valid prefix: no ASCII byte, so no JSON structure, is ever taken into a
    replacement)."""
    return line.decode("utf-8", "replace").encode("utf-8")


# msgspec's word for a number past a float's range (``1e999``): valid JSON, which a JavaScript
# agent reads as Infinity and writes back (and sends to its model) as null.
OUT_OF_RANGE: Final = "Number out of range"


def loads_as_the_agent(line: bytes, *, infinite: bool = False) -> Any:
    """``line``'s JSON as an agent written in JavaScript reads and passes it on: a number past
    a float's range is ``None`` (what ``JSON.stringify`` makes of Infinity), so that what
    parsing accepted is never refused when the line is read back, and nothing memd writes
    holds ``Infinity`` (not JSON). With ``infinite`` it is the signed infinity the agent
    holds instead, for a reader that must tell it from a null in a field it reads
    (:func:`past_range`; msgspec encodes it back as null). Raises :class:`BadLine` for what
    is not JSON; ``RecursionError`` for nesting past Python's limit."""
    text = as_node_reads(replace_lone_surrogates(line) or line)
    parse_float = float if infinite else _finite_or_none
    try:
        return json.loads(text, parse_float=parse_float, parse_constant=_no_constant)
    except ValueError as exc:
        raise BadLine(f"not valid JSON: {exc}") from None


def past_range(value: Any) -> bool:
    """``value``, in a field memd reads, is a number past a float's range (decoded by
    :func:`loads_as_the_agent` with ``infinite``): the line is bad."""
    return isinstance(value, float) and math.isinf(value)


def refused(exc: msgspec.ValidationError, what: str) -> BadLine:
    """The bad line a typed decoder's refusal makes, naming a number past a float's range
    (msgspec: ``Number out of range - at `$.message.usage.input_tokens```) as such."""
    text = str(exc)
    if text.startswith(OUT_OF_RANGE):
        where = text.partition(" - at ")[2] or "the top level"
        return BadLine(f"a number past a float's range at {where}")
    return BadLine(f"{what}: {text}")


def _finite_or_none(literal: str) -> float | None:
    number = float(literal)
    return number if math.isfinite(number) else None


def _no_constant(literal: str) -> None:
    raise ValueError(f"{literal} is not JSON")


_ESCAPE: Final = re.compile(rb"(\\+)u([dD][89a-fA-F][0-9a-fA-F]{2})")
_REPLACEMENT: Final = rb"\ufffd"


def replace_lone_surrogates(line: bytes) -> bytes | None:
    """``line`` with each unpaired ``\\uD800``-``\\uDFFF`` escape made ``\\ufffd``; ``None``
    when it has none (then the line's JSON error is something else)."""
    escapes = [m for m in _ESCAPE.finditer(line) if len(m.group(1)) % 2 == 1]
    lone: list[tuple[int, int]] = []
    i = 0
    while i < len(escapes):
        unit = int(escapes[i].group(2), 16)
        after = escapes[i + 1] if i + 1 < len(escapes) else None
        if (
            unit < 0xDC00
            and after is not None
            and after.start() == escapes[i].end()
            and len(after.group(1)) == 1
            and int(after.group(2), 16) >= 0xDC00
        ):
            i += 2  # a valid high + low pair
            continue
        lone.append((escapes[i].end() - 6, escapes[i].end()))
        i += 1
    if not lone:
        return None
    parts: list[bytes] = []
    start = 0
    for begin, end in lone:
        parts += [line[start:begin], _REPLACEMENT]
        start = end
    parts.append(line[start:])
    return b"".join(parts)
