"""The suite's own guards (tests/conftest.py), run on a small inner suite: a test that waits
forever fails alone within its deadline and names where it waited; a failed test's leaked
socket does not fail the next test."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

CONFTEST = Path(__file__).with_name("conftest.py")

INNER = """
import socket

import anyio
import pytest

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
"""


def test_a_hung_test_fails_alone_naming_its_wait(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST.read_text())
    pytester.makepyfile(test_inner=INNER)
    pytester.makeini(
        "[pytest]\naddopts = -p anyio\nfilterwarnings = error\n"
        "markers =\n    deadline(seconds): x\n    slow: x\ntimeout = 60\n"
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    assert "test_waits_forever did not finish within 1 s" in out
    waited_at = INNER.lstrip("\n").splitlines().index("    await never.wait()") + 1
    assert f"test_inner.py:{waited_at} (test_waits_forever)" in out  # the line it waited at
    assert "test_next_one_collects_garbage PASSED" in out or "1 passed" in out
