"""The suite's own guards (tests/conftest.py and pyproject's pytest settings), run on a small
inner suite: a test that waits forever fails alone within its deadline and names where it
waited; a failed test's leaked socket does not fail the next test; a failing @given reports its
example instead of stopping the whole run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")
PYPROJECT = Path(__file__).parents[1] / "pyproject.toml"

INNER = """
import socket

import anyio
import pytest
from hypothesis import given, strategies as st

pytestmark = pytest.mark.anyio


@pytest.mark.deadline(1)
async def test_waits_forever() -> None:
    never = anyio.Event()
    await never.wait()


def test_fails_with_a_socket_open() -> None:
    s = socket.socket()
    assert s is None


def test_next_one_collects_garbage() -> None:
    import gc

    gc.collect()


@given(st.integers())
def test_a_failing_property(x: int) -> None:
    assert x < 5, f"the property fails at x={x}"


def test_after_the_property() -> None:
    pass
"""


def test_a_hung_test_fails_alone_naming_its_wait(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The copied conftest imports tests.* helpers: the inner run finds them from the repo.
    repo = str(PYPROJECT.parent)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    )
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_inner=INNER)
    pytester.makepyprojecttoml(PYPROJECT.read_text())  # the project's own pytest settings
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_inner.py", timeout=120)
    assert "INTERNALERROR" not in result.stdout.str()
    result.assert_outcomes(passed=2, failed=3)
    out = result.stdout.str()
    assert "test_waits_forever did not finish within 1 s" in out
    waited_at = INNER.lstrip("\n").splitlines().index("    await never.wait()") + 1
    assert f"test_inner.py:{waited_at} (test_waits_forever)" in out  # the line it waited at
    # The shrunk example, in the test's own words (Hypothesis's wording changes between versions).
    assert "the property fails at x=5" in out
