"""Shared fixtures. Tests run on asyncio through anyio's pytest plugin."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import gc
import inspect
import os
import re
import shutil
import sysconfig
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, settings

from memd.config_llm import LLMConfig
from memd.llm.backends import open_llm
from memd.llm.client import LLM, Backend, Disabled, close_llm
from memd.testing.loopback import LoopbackAPI
from memd_client import paths as client_paths
from tests import daemon_harness
from tests.claude_cli import (
    EACH_VERSION,
    NEWEST_VERSION,
    PACKAGE,
    ClaudeCLI,
    installed_claude,
)
from tests.other_cli import (
    CODEX_PACKAGE,
    GEMINI_PACKAGE,
    AgentCLI,
    installed_codex,
    installed_gemini,
)
from tests.qwen_cli import QWEN_PACKAGE, QwenCLI, installed_qwen

# One Hypothesis profile for every @given, loaded before any test module is imported so each
# @settings(...) in the suite inherits it: no deadline and no "too slow" or "too large" health
# checks, which fail on a loaded 2-core machine or a cold .hypothesis cache while finding
# nothing. Example counts stay as each test sets them.
# A test that names its own suppress_health_check replaces this list: it must include it
# (`[*PROFILE_SUPPRESSED, …]`); tests/test_hypothesis_profile.py checks every @given.
PROFILE_SUPPRESSED = (HealthCheck.too_slow, HealthCheck.data_too_large)
settings.register_profile(
    "memd",
    deadline=None,
    suppress_health_check=list(PROFILE_SUPPRESSED),
    print_blob=True,
)
settings.load_profile("memd")


# The transcripts the tests read: tests/corpus/ (in the project, a subset chosen to cover every
# format seen; its README.md says how), and the full shared corpus for the sweeps when it is
# there. Nothing needs the shared one: without it each sweep runs on the subset and says, in one
# skipped test, where to put it.
CORPUS = Path(__file__).with_name("corpus")
SHARED_HERE = Path(__file__).resolve().parents[2] / "shared"
_MODEL_FIELD = re.compile(rb'"(model|requestedModel)": ?"[^"]*"')


def on_a_gateway_model(transcript: bytes) -> bytes:
    """``transcript`` as if its responses came from a model memd knows no window of (a
    gateway's own name): the config's ``compaction.default_context_window`` is its window."""
    return _MODEL_FIELD.sub(rb'"\1":"gateway-model"', transcript)


def _find_shared() -> Path | None:
    """The shared data dir: ``shared/`` beside the checkout or any folder above it (a git
    worktree under ``wt/<name>`` sits one level deeper than the main checkout); ``None``."""
    for folder in Path(__file__).resolve().parents[1:]:
        if (folder / "shared" / "data" / "transcripts").is_dir():
            return folder / "shared"
    return None


SHARED = _find_shared()
# Other agents' sessions (Codex CLI, Gemini CLI): tests/corpus/agents/, copied unmodified from
# the shared data's agents/ (its README.md describes both formats); never in the sweeps above.
AGENTS = CORPUS / "agents"
FULL_CORPUS = SHARED / "data" / "transcripts" if SHARED is not None else None
NO_FULL_CORPUS = (
    f"the full transcript corpus is absent: put the shared data dir at {SHARED_HERE} "
    "(with data/transcripts/) to sweep it"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def api() -> Iterator[LoopbackAPI]:
    """A loopback Messages-API server for one test (modules override it to script it)."""
    with LoopbackAPI() as server:
        yield server


@pytest.fixture
async def llm(api: LoopbackAPI) -> AsyncIterator[LLM]:
    """The real SDK client pointed at ``api``."""
    opened = open_llm(LLMConfig(base_url=api.url, timeout_s=30.0), {"ANTHROPIC_API_KEY": "test"})
    assert not isinstance(opened, Disabled)
    yield opened
    await close_llm(opened)


@pytest.fixture
async def local(api: LoopbackAPI) -> AsyncIterator[Backend]:
    """The real openai SDK pointed at ``api`` as at a local OpenAI-compatible server."""
    opened = open_llm(LLMConfig(provider="openai", base_url=api.url + "/v1"), {})
    assert isinstance(opened, Backend)
    yield opened
    await opened.aclose()


def all_transcripts() -> list[Path]:
    """Every transcript a sweep reads: the full shared corpus when it is there, else
    tests/corpus/, and the files of tests/corpus/ the full corpus lacks (newer formats
    captured for the project); main and sub-agent files."""
    own = _claude_files(CORPUS)
    if FULL_CORPUS is None:
        return own
    full = _claude_files(FULL_CORPUS)
    shared = {p.relative_to(FULL_CORPUS) for p in full}
    return sorted(full + [p for p in own if p.relative_to(CORPUS) not in shared])


def _claude_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.jsonl") if p.relative_to(root).parts[0] != "agents")


def main_transcripts() -> list[Path]:
    """Main-conversation transcripts only (not ``subagents/`` files)."""
    return [p for p in all_transcripts() if "subagents" not in p.parts]


def corpus_id(path: Path) -> str:
    """A transcript's test id: its path in the corpus it came from."""
    for root in (FULL_CORPUS, CORPUS):
        if root is not None and path.is_relative_to(root):
            return str(path.relative_to(root))
    return path.name


def sweep(paths: list[Path]) -> list[Any]:
    """``paths`` as test parameters; without the full corpus, one more that is skipped with
    the line that says where to put it."""
    params: list[Any] = [pytest.param(p, id=corpus_id(p)) for p in paths]
    if FULL_CORPUS is None:
        params.append(pytest.param(None, id="full-corpus", marks=pytest.mark.skip(NO_FULL_CORPUS)))
    return params


# Every async test runs under its own anyio deadline, below pytest-timeout's, so a test that
# waits forever on one of the project's events (a scheduler that never goes idle, a fake clock
# that never reaches a retry time) fails alone with the line it was waiting at, and its
# cancellation unwinds the test's task groups, servers and processes the structured way. A
# pytest-timeout signal instead lands anywhere in the event loop and can leave teardown hung.
UNIT_DEADLINE_S = 30.0
SLOW_DEADLINE_S = 90.0


def deadline_for(item: pytest.Item) -> float:
    """The test's deadline: ``@pytest.mark.deadline(seconds)``, else by whether it is slow."""
    marker = item.get_closest_marker("deadline")
    if marker is not None:
        return float(marker.args[0])
    return SLOW_DEADLINE_S if item.get_closest_marker("slow") else UNIT_DEADLINE_S


class DeadlineExceeded(AssertionError):
    """An async test ran past its deadline; the chained exception shows where it waited."""


def with_deadline(
    test: Callable[..., Awaitable[None]], seconds: float, name: str
) -> Callable[..., Awaitable[None]]:
    @functools.wraps(test)
    async def bounded(**kwargs: Any) -> None:
        try:
            with anyio.fail_after(seconds):
                await test(**kwargs)
        except TimeoutError as exc:
            where = waiting_point(exc, test.__code__.co_filename)
            raise DeadlineExceeded(
                f"{name} did not finish within {seconds:g} s; it was waiting at {where}"
            ) from exc

    return bounded


LIBRARY_DIRS = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "purelib", "platlib")})


def waiting_point(exc: BaseException, test_file: str) -> str:
    """Where the cancelled test was waiting: its own innermost line, then the innermost line
    of the project's code below it (library frames are skipped)."""
    cause = exc.__context__ or exc
    tb = cause.__traceback__
    in_test = in_project = ""
    while tb is not None:
        code = tb.tb_frame.f_code
        spot = f"{code.co_filename}:{tb.tb_lineno} ({code.co_name})"
        if code.co_filename == test_file:
            in_test = spot
        elif not code.co_filename.startswith(LIBRARY_DIRS) and code.co_filename != __file__:
            in_project = spot
        tb = tb.tb_next
    return " -> ".join(s for s in (in_test, in_project) if s) or "an unknown point"


@pytest.fixture(autouse=True)
def no_daemon_outlives_its_test() -> Iterator[None]:
    """A daemon a test started (``daemon_harness.start_memd``) and left running, because it
    failed between the start and the stop, is killed when the test ends."""
    before = len(daemon_harness.STARTED)
    yield
    for proc in daemon_harness.STARTED[before:]:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    del daemon_harness.STARTED[before:]


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> None:
    test = pyfuncitem.obj
    if inspect.iscoroutinefunction(test) and not hasattr(test, "hypothesis"):
        pyfuncitem.obj = with_deadline(test, deadline_for(pyfuncitem), pyfuncitem.nodeid)


def release_locals(tb: TracebackType | None) -> None:
    """Drop what a finished traceback's frames hold: their locals and the snapshot of them
    that reporting took (``f_locals``), which ``frame.clear()`` alone leaves behind."""
    while tb is not None:
        frame = tb.tb_frame
        with contextlib.suppress(RuntimeError):  # a frame still executing keeps its locals
            frame.clear()
            frame.f_locals.clear()
        tb = tb.tb_next


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and call.when == "call" and call.excinfo is not None:
        # A failed test can leave sockets or files for the garbage collector, held by its
        # traceback's frames. The report is written by now: drop those frames' locals and
        # collect, inside the failed test, so their ResourceWarnings (errors here) do not fail
        # an unrelated test that happens to run the next collection.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            release_locals(call.excinfo.tb)
            gc.collect()
    return report


@pytest.fixture(scope="session")
def claude_cli() -> ClaudeCLI:
    """The real Claude Code CLI (pinned, installed with npm into a cache dir on first use);
    skips when npm is absent. See ``tests/claude_cli.py``."""
    command = installed_claude()
    if command is None:
        pytest.skip(f"npm is not installed: cannot install {PACKAGE} for the real-client tests")
    return ClaudeCLI(command)


@pytest.fixture(scope="session")
def codex_cli() -> AgentCLI:
    """The real Codex CLI (pinned; npm into the test cache on first use); skips when npm is
    absent. See ``tests/other_cli.py``."""
    command = installed_codex()
    if command is None:
        pytest.skip(f"npm is not installed: cannot install {CODEX_PACKAGE} for the real-CLI tests")
    return AgentCLI("codex", command)


@pytest.fixture(scope="session")
def gemini_cli() -> AgentCLI:
    """The real Gemini CLI (pinned; npm into the test cache on first use); skips when npm is
    absent. See ``tests/other_cli.py``."""
    command = installed_gemini()
    if command is None:
        pytest.skip(f"npm is not installed: cannot install {GEMINI_PACKAGE} for the real-CLI tests")
    return AgentCLI("gemini", command)


@pytest.fixture(scope="session")
def qwen_cli() -> QwenCLI:
    """The real Qwen Code CLI (pinned; npm into the test cache on first use); skips when npm is
    absent. See ``tests/qwen_cli.py``."""
    command = installed_qwen()
    if command is None:
        pytest.skip(f"npm is not installed: cannot install {QWEN_PACKAGE} for the real-CLI tests")
    return QwenCLI(command)


@pytest.fixture
def memd_api() -> Iterator[LoopbackAPI]:
    """memd's own model beside the real Claude Code CLI: the strict profile."""
    with LoopbackAPI() as server:
        yield server


@pytest.fixture
def claude_api() -> Iterator[LoopbackAPI]:
    """The real Claude Code CLI's model: the real-client profile."""
    with LoopbackAPI(profile="real_client", default_text="OK from stub") as server:
        yield server


@pytest.fixture(scope="session")
def claude_cli_newest() -> ClaudeCLI:
    """The newest pinned Claude Code CLI (``NEWEST_VERSION``), as :func:`claude_cli`."""
    command = installed_claude(version=NEWEST_VERSION)
    if command is None:
        pytest.skip(f"npm is not installed: cannot install Claude Code {NEWEST_VERSION}")
    return ClaudeCLI(command, NEWEST_VERSION)


@pytest.fixture(scope="session", params=EACH_VERSION)
def claude_cli_each(request: pytest.FixtureRequest) -> ClaudeCLI:
    """The real Claude Code CLI once per version that differs (:data:`EACH_VERSION`)."""
    version = str(request.param)
    command = installed_claude(version=version)
    if command is None:
        pytest.skip(f"npm is not installed: cannot install Claude Code {version}")
    return ClaudeCLI(command, version)


@pytest.fixture
def systemd_runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The real ``/run/user/<uid>``, as systemd gives it to a user service (made for the test
    when the machine has none, and removed after). Every process of this user shares it: the
    suite's workers (pytest-xdist) take turns, under a lock beside their common temp folder."""
    turn = tmp_path_factory.getbasetemp().parent / "run-user.lock"
    with turn.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield from real_run_user()


def real_run_user() -> Iterator[Path]:
    base = Path(f"/run/user/{os.getuid()}")
    if (base / "memd" / "memd.sock").exists():
        pytest.skip(f"a memd already listens in {base}/memd")
    made = not base.exists()
    if made:
        try:
            base.mkdir(parents=True, mode=0o700)
        except OSError as exc:
            pytest.skip(f"cannot make {base}: {exc}")
    if not client_paths.safe_folder(base):
        pytest.skip(f"{base} is not a private folder of this user")
    try:
        yield base
    finally:
        shutil.rmtree(base / "memd", ignore_errors=True)
        if made:
            shutil.rmtree(base, ignore_errors=True)
