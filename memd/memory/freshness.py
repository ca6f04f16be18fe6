"""How old a memory is, and the warnings that make an agent check old memories (R-M7).

Ages are whole days, ``floor((now - mtime) / 86_400_000 ms)``, never negative (a clock that
went backwards or a file touched in the future reads as ``today``). Models weigh
"47 days ago" far better than a raw timestamp, so recall shows the relative form. Memories
older than one day carry a warning with the exact age; nothing is ever deleted for being old
(R-M8): staleness is shown, not acted on.

All functions take ``now_ms`` explicitly, so callers pass their clock and tests pass numbers.
"""

from __future__ import annotations

MS_PER_DAY = 86_400_000

RECALL_CAVEAT = (
    "Recalled memories are notes from earlier sessions and may have gone stale. Treat each "
    "one as what was true when it was written. Before you rely on one, or repeat it to the "
    "user as fact, check it against the current files or state; when what you see now "
    "disagrees with a memory, trust what you see and fix or remove the outdated memory."
)


def age_days(mtime_ms: int | float, now_ms: int | float) -> int:
    """Whole days between ``mtime_ms`` and ``now_ms``; 0 when the mtime is in the future."""
    return max(0, int((now_ms - mtime_ms) // MS_PER_DAY))


def age_text(mtime_ms: int | float, now_ms: int | float) -> str:
    """``today``, ``yesterday`` or ``N days ago``."""
    days = age_days(mtime_ms, now_ms)
    if days == 0:
        return "today"
    if days == 1:
        return "yesterday"
    return f"{days} days ago"


def freshness_warning(mtime_ms: int | float, now_ms: int | float) -> str:
    """A staleness warning for memories older than one day; ``""`` for newer ones."""
    days = age_days(mtime_ms, now_ms)
    if days <= 1:
        return ""
    return (
        f"This memory was last updated {days} days ago. It records what was observed at that "
        "time, not the current state: code may have moved or changed since, so verify any "
        "claim about code (especially file:line references) against the current files "
        "before stating it as fact."
    )


def freshness_reminder(mtime_ms: int | float, now_ms: int | float) -> str:
    """:func:`freshness_warning` inside ``<system-reminder>`` tags, or ``""`` when fresh.

    Use this where the text is shown on its own (a memory file read into context); use the
    bare warning where the surrounding message is already a system reminder.
    """
    text = freshness_warning(mtime_ms, now_ms)
    return f"<system-reminder>{text}</system-reminder>\n" if text else ""
