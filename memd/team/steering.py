"""Text that tries to steer an agent instead of informing it (pure).

A team memory is someone else's note, injected into an agent's context. A note that tells the
agent to drop its instructions, that dresses up as a system or tool message, that carries
tool-call syntax or hides characters from the people reading it is not a note: memd keeps it
out of every context (quarantined, shown to the user with this reason) instead of injecting
it. :func:`steering` answers why a text reads so, or ``None``.

The rules look for the forms prompt injection takes, not for topics: a memory may say "the
CI ignores the lint step" or quote a ``<div>``; it may not say "ignore the previous
instructions" or open a ``<system-reminder>``. Matching runs on a folded copy (NFKC, case
folded, zero-width characters dropped, spaces collapsed), so ``IGNORE  previous`` and
``ig\u200bnore previous`` read alike. Costs one pass per rule over at most
:data:`MAX_CHECKED_CHARS` characters.
"""

from __future__ import annotations

import re
import unicodedata

MAX_CHECKED_CHARS = 256 * 1024

# Characters a reader does not see: bidirectional overrides and isolates, the zero-width
# space and joiners that join nothing, and the tag characters (an invisible copy of ASCII
# that models read). The zero-width (non-)joiner and the direction marks are left alone:
# emoji sequences and Persian, Hebrew or Arabic text use them.
_HIDDEN = re.compile("[\u202a-\u202e\u2066-\u2069\u200b\u2060-\u2064\ufeff\U000e0000-\U000e007f]")
_ZERO_WIDTH = re.compile("[\u200b-\u200d\u2060\ufeff]")
_SPACES = re.compile(r"[ \t]+")

_ROLE_TAGS = (
    r"system|system[-_]reminder|system[-_]prompt|assistant|human|user[-_]prompt|instructions?"
    r"|tool[-_]use|tool[-_]result|tool[-_]call|function[-_]calls?|invoke|parameter"
    r"|antml:[a-z_]+|im[-_]start|im[-_]end"
)
_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "it tells the agent to ignore its instructions",
        re.compile(
            r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:all\s+(?:of\s+)?|any\s+|every\s+)?"
            r"(?:(?:the|your|my)\s+)?(?:previous|prior|above|earlier|preceding|system|original"
            r"|existing|all|any|your|safety)\s+(?:\w+\s+)?(?:instructions?|prompts?|directives?"
            r"|guidelines|rules|guardrails|messages)\b"
            r"|\bforget\s+(?:everything|all)\s+(?:you\s+(?:were|have\s+been)\s+told|above|before)"
        ),
    ),
    (
        "it claims to give the agent new instructions",
        re.compile(
            r"\b(?:new|updated|revised|real|actual|hidden|secret)\s+system\s+"
            r"(?:instructions?|prompt|message)"
            r"|\byou\s+are\s+now\s+(?:in\s+)?(?:developer|god|jailbreak|dan|unrestricted|admin)"
            r"\s+mode|\byou\s+are\s+no\s+longer\s+(?:bound|restricted|limited)\b"
        ),
    ),
    (
        "it tells the agent to hide something from the user",
        re.compile(
            r"\b(?:do\s+not|don't|never)\s+(?:tell|inform|mention\s+(?:this\s+|it\s+)?to|reveal"
            r"\s+(?:this\s+|it\s+)?to|let)\s+the\s+user\b"
            r"|\bwithout\s+(?:telling|informing|asking)\s+the\s+user\b"
        ),
    ),
    (
        "it holds a tag that poses as a system, user or tool message",
        re.compile(rf"<\s*/?\s*(?:{_ROLE_TAGS})\b[^>\n]{{0,200}}>|<\|(?:im_start|im_end|system)"),
    ),
    (
        "it holds chat-turn markers",
        re.compile(r"^\s*(?:human|assistant)\s*:\s*\S|\[/?inst\]|<<\s*/?sys\s*>>", re.MULTILINE),
    ),
    (
        "it holds tool-call syntax",
        re.compile(
            r"\"type\"\s*:\s*\"(?:tool_use|function|tool_result)\""
            r"|\"(?:tool_calls|function_call)\"\s*:"
            r"|\brecipient_name\s*[:=]"
        ),
    ),
)


# One pass over a text for every rule (the common case, a note, matches none of them).
_ANY = re.compile("|".join(f"(?:{pattern.pattern})" for _, pattern in _RULES), re.MULTILINE)


def steering(text: str) -> str | None:
    """Why ``text`` reads as an attempt to steer an agent, or ``None``."""
    text = text[:MAX_CHECKED_CHARS]
    hidden = _HIDDEN.search(text)
    if hidden is not None:
        return f"it holds characters a reader does not see (U+{ord(hidden.group()):04X})"
    folded = _folded(text)
    if _ANY.search(folded) is None:
        return None
    for reason, pattern in _RULES:
        if pattern.search(folded):
            return reason
    return None


def _folded(text: str) -> str:
    text = _ZERO_WIDTH.sub("", unicodedata.normalize("NFKC", text))
    return _SPACES.sub(" ", text.casefold())
