"""Memory age and staleness warnings (R-M7)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.memory.freshness import (
    MS_PER_DAY,
    RECALL_CAVEAT,
    age_days,
    age_text,
    freshness_reminder,
    freshness_warning,
)

NOW = 1_760_000_000_000


@pytest.mark.parametrize(
    ("elapsed_ms", "days", "text"),
    [
        (0, 0, "today"),
        (MS_PER_DAY - 1, 0, "today"),
        (MS_PER_DAY, 1, "yesterday"),
        (2 * MS_PER_DAY - 1, 1, "yesterday"),
        (2 * MS_PER_DAY, 2, "2 days ago"),
        (47 * MS_PER_DAY + 5, 47, "47 days ago"),
        (-5 * MS_PER_DAY, 0, "today"),  # mtime in the future: never negative
    ],
)
def test_age_in_whole_days_at_the_boundaries(elapsed_ms: int, days: int, text: str) -> None:
    assert age_days(NOW - elapsed_ms, NOW) == days
    assert age_text(NOW - elapsed_ms, NOW) == text


def test_no_warning_up_to_one_day_old() -> None:
    assert freshness_warning(NOW, NOW) == ""
    assert freshness_warning(NOW - (2 * MS_PER_DAY - 1), NOW) == ""
    assert freshness_reminder(NOW - MS_PER_DAY, NOW) == ""


def test_older_memories_warn_with_the_exact_age_and_what_to_verify() -> None:
    warning = freshness_warning(NOW - 47 * MS_PER_DAY, NOW)
    assert "47 days" in warning
    assert "file:line" in warning
    assert "verify" in warning.lower()
    assert "point" in warning or "at that time" in warning  # a snapshot, not live state
    assert freshness_warning(NOW - 2 * MS_PER_DAY, NOW).count("2 days") == 1


def test_the_wrapped_variant_is_the_warning_in_system_reminder_tags() -> None:
    mtime = NOW - 3 * MS_PER_DAY
    assert freshness_reminder(mtime, NOW) == (
        f"<system-reminder>{freshness_warning(mtime, NOW)}</system-reminder>\n"
    )


def test_the_recall_caveat_says_current_observation_wins() -> None:
    lowered = RECALL_CAVEAT.lower()
    assert "stale" in lowered and "trust what you see" in lowered


@given(
    mtime=st.integers(0, 2 * NOW),
    now=st.integers(0, 2 * NOW),
    later=st.integers(0, 10 * MS_PER_DAY),
)
def test_age_is_never_negative_and_grows_with_time(mtime: int, now: int, later: int) -> None:
    assert age_days(mtime, now) >= 0
    assert age_days(mtime, now + later) >= age_days(mtime, now)
    assert bool(freshness_warning(mtime, now)) == (age_days(mtime, now) > 1)
