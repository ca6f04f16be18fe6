"""Every @given in the suite runs under the project's Hypothesis profile (conftest): no
deadline and no "too slow" / "data too large" health check, which fail on a loaded machine."""

from __future__ import annotations

import importlib
from pathlib import Path

from hypothesis import HealthCheck

from tests.conftest import PROFILE_SUPPRESSED

TESTS = Path(__file__).resolve().parent


def test_every_given_keeps_the_profile() -> None:
    checked = 0
    for path in sorted(TESTS.glob("test_*.py")):
        module = importlib.import_module(f"tests.{path.stem}")
        for name, test in vars(module).items():
            if not hasattr(test, "hypothesis"):
                continue
            own = test._hypothesis_internal_use_settings
            assert own.deadline is None, f"{path.name}::{name} sets a deadline"
            missing = set(PROFILE_SUPPRESSED) - set(own.suppress_health_check)
            assert not missing, f"{path.name}::{name} re-enables {missing}"
            checked += 1
    assert checked > 20  # the suite's property tests were found
    assert HealthCheck.too_slow in PROFILE_SUPPRESSED
