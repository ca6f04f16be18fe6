"""An agent's CLI as a model backend (issue 34): what every CLI room shares.

A CLI room (:mod:`memd.llm.cli_claude`, :mod:`memd.llm.cli_codex`,
:mod:`memd.llm.cli_gemini`) knows its CLI: the flags that run it headless with no tool that
can write or run anything, no hook and no MCP server, how it reports its answer, its usage
and its failures, and where its login lives. This module runs it:

- **the environment is built from nothing** (:mod:`memd.llm.cli_input`): home, path,
  locale, proxies, certificates and the CLI's own variables the room names, never memd's
  API keys or anything else of memd's; plus ``MEMD_MODEL_CALL``, which memd's own hook
  command reads to do nothing at once, whatever hooks the CLI still runs;
- **the prompt goes on stdin**, the system prompt into a file of a private per-call folder
  (0700, removed after the call), so no argument reaches the OS's length limits;
- **one process group per call**: memd's deadline (``llm.<cli>.timeout_s``), memd's stop at
  shutdown or a cancelled job ends it with SIGTERM to the whole group, then SIGKILL after
  :data:`TERM_GRACE_S`; output is capped (:data:`MAX_STDOUT_BYTES`, past it the group is
  killed and the answer refused);
- **failures leave as the seam's classes**: a CLI that is gone is :class:`Unreachable`; one
  killed by a signal memd did not send, or one that exited non-zero saying nothing the room
  recognises, :class:`Unavailable` (the guard backs off); output that is not the JSON the CLI
  prints, :class:`MalformedAnswer` (the job parks, the answer is counted). Nothing here
  retries: the cost guard does, after its back-off.

:class:`CLIBackend` is the :class:`~memd.llm.client.Backend` every room's opener returns: it
cannot drive tools (``facts().tools`` is False, so every job asks it for a whole answer that
memd checks and applies itself), and its calls cost the user's plan (``priced``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import anyio
from anyio.abc import ByteReceiveStream, Process

from memd.config_llm import CLIConfig
from memd.errors import BadRequest, LLMError, MalformedAnswer, Unavailable, Unreachable
from memd.llm.cli_input import cli_env, find_command, printable, prompt_of
from memd.llm.client import PROBE_MAX_S, BackendFacts, Calls, Disabled, LLMReply
from memd_client.paths import model_calls_dir

log = logging.getLogger(__name__)

WORK = "memd-model-call"  # the folder a CLI runs in (its name shows in the agent's own lists)
MAX_STDOUT_BYTES = 8 * 1024 * 1024
MAX_STDERR_BYTES = 16 * 1024  # the last ones are kept: they say how it ended
TERM_GRACE_S = 1.5


@dataclass(frozen=True)
class Ran:
    """How one run of the CLI ended. ``returncode`` is negative for a signal (``-9``)."""

    returncode: int
    stdout: bytes
    stderr: bytes
    seconds: float

    def stderr_tail(self, limit: int = 300) -> str:
        """The last line of stderr that says something, for an error message."""
        lines = [ln.strip() for ln in self.stderr.decode("utf-8", "replace").splitlines()]
        said = [ln for ln in lines if ln]
        return printable(said[-1] if said else "", limit)


@dataclass(frozen=True)
class Call:
    """One request as a CLI takes it: the system prompt's file, the prompt for stdin."""

    model: str
    system_file: Path
    prompt: str
    max_tokens: int
    folder: Path  # the call's private folder (removed after the call)


class Room(Protocol):
    """One agent's CLI: how memd runs it and reads what it says."""

    name: str  # the backend's name: "claude_cli", …
    program: str  # the executable's usual name: "claude", …
    own_env: tuple[str, ...]  # the CLI's own variables passed on from memd's environment

    def argv(self, command: str, call: Call) -> list[str]:
        """The command line of one call (the prompt comes on stdin)."""
        ...

    def env(self, base: dict[str, str], call: Call) -> dict[str, str]:
        """``base`` plus what the CLI needs set for a call (its model URL, telemetry off…)."""
        ...

    def answer(self, ran: Ran, call: Call) -> LLMReply:
        """The reply in what the CLI printed; raises an :class:`LLMError` for a failure."""
        ...

    def login(self) -> str | None:
        """Where the CLI keeps the user's login, when it has one (no call spent)."""
        ...

    def after(self, ran: Ran | None, call: Call) -> None:
        """Clean up what the CLI left of the call that memd can remove (blocking)."""
        ...

    def prepare(self, workdir: Path) -> None:
        """Write what the CLI reads from memd's folder before its first call (blocking;
        raises OSError)."""
        ...


def model_calls_root(env: Mapping[str, str]) -> Path:
    """Where memd runs its CLIs (private, beside its socket): each CLI works in
    ``<root>/<name>/memd-model-call``, so a session an agent records for memd's own call
    names a folder below it, and memd's watcher never follows it."""
    return model_calls_dir(env)


def private_dir(path: Path) -> Path:
    """``path`` made (with every missing folder above it) readable by its owner alone."""
    missing: list[Path] = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        folder.mkdir(mode=0o700, exist_ok=True)
    return missing[0] if missing else path


def parse_json(ran: Ran, program: str) -> Any:
    """What the CLI printed as one JSON value; :class:`MalformedAnswer` when it is not."""
    try:
        return json.loads(ran.stdout)
    except (ValueError, RecursionError):  # not JSON, or nested past what Python reads
        pass
    if ran.returncode != 0:
        raise exited_badly(ran, program)
    raise MalformedAnswer(
        f"{program} printed no JSON result ({len(ran.stdout)} bytes that are not its answer); "
        "nothing changed"
    )


def exited_badly(ran: Ran, program: str) -> LLMError:
    """A run that ended without an answer the room could read, in the seam's classes."""
    if ran.returncode < 0:
        name = _signal_name(-ran.returncode)
        return Unavailable(f"{program} was killed by {name} (not by memd)")
    said = ran.stderr_tail()
    return Unavailable(f"{program} exited {ran.returncode}" + (f": {said}" if said else ""))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class CLIBackend:
    """:class:`~memd.llm.client.Backend` over one agent's CLI (see the module docstring)."""

    def __init__(
        self,
        room: Room,
        *,
        command: Path,
        workdir: Path,
        env: Mapping[str, str],
        timeout_s: float,
    ) -> None:
        self.room = room
        self.name = room.name
        self.command = command
        self.workdir = workdir
        self.timeout_s = timeout_s
        self._env = cli_env(env, room.own_env)
        self._calls = Calls(str(command), f"check that {command} still runs")

    def __repr__(self) -> str:
        return f"CLIBackend({self.name!r}, {str(self.command)!r})"

    def facts(self) -> BackendFacts:
        calls = self._calls
        where = str(self.command)
        return BackendFacts(
            self.name, where, False, True, calls.unreachable_since, calls.unreachable_error
        )

    async def create_message(
        self,
        *,
        model: str,
        system: str | list[dict[str, Any]],
        messages: list[dict[str, Any]],
        max_tokens: int,
        tools: list[dict[str, Any]] | None = None,
        timeout: float | None = None,  # noqa: ASYNC109  # part of the LLM contract
    ) -> LLMReply:
        if tools:
            raise BadRequest(f"{self.name} runs its CLI without tools; it answers whole")
        system_text, prompt = prompt_of(system, messages)
        limit = self.timeout_s if timeout is None else min(timeout, self.timeout_s)
        try:
            call = await anyio.to_thread.run_sync(
                self._prepare, model, system_text, prompt, max_tokens
            )
        except OSError as exc:
            raise _no_folder(self.workdir, exc) from None
        ran: Ran | None = None
        try:
            with self._calls.call(limit):
                ran = await self._run(self.room.argv(str(self.command), call), call)
            try:
                return self.room.answer(ran, call)
            except LLMError as exc:
                raise self._calls.failed(exc) from None
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self._finish, ran, call)

    async def probe(self, *, model: str, timeout: float) -> str:  # noqa: ASYNC109
        """``<cli> --version`` and its login, found on disk: no call, nothing of the plan.
        That is the CLI's whole start, slow on a busy machine: it is given up to
        :data:`~memd.llm.client.PROBE_MAX_S` (within ``timeout_s``) whatever ``timeout``,
        a network probe's limit, says."""
        call = Call(model, self.workdir / "none", "", 1, self.workdir)
        with self._calls.call(min(self.timeout_s, max(timeout, PROBE_MAX_S))):
            ran = await self._run([str(self.command), "--version"], call, stdin=False)
        if ran.returncode != 0:
            raise exited_badly(ran, self.room.program)
        version = printable(ran.stdout.decode("utf-8", "replace").strip(), 80)
        login = await anyio.to_thread.run_sync(self.room.login)
        if login is None:
            raise _not_logged_in(self.room.program)
        return f"{self.command} ({version}) runs; logged in ({login}); {model} is asked for"

    def stop(self, reason: str) -> None:
        self._calls.stop(reason)

    async def aclose(self) -> None:
        return None

    # -- one run ---------------------------------------------------------------------------

    def _prepare(self, model: str, system: str, prompt: str, max_tokens: int) -> Call:
        calls = self.workdir / "calls"
        private_dir(calls)
        folder = Path(tempfile.mkdtemp(prefix="call-", dir=calls))
        system_file = folder / "system.md"
        fd = os.open(system_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as out:
            out.write(system)
        return Call(model, system_file, prompt, max_tokens, folder)

    def _finish(self, ran: Ran | None, call: Call) -> None:
        try:
            self.room.after(ran, call)
        except Exception as exc:  # noqa: BLE001 - a clean-up never turns an answer into a failure
            log.warning("%s: cleaning up after a call failed: %s", self.name, exc)
        finally:
            shutil.rmtree(call.folder, ignore_errors=True)

    async def _run(self, argv: list[str], call: Call, *, stdin: bool = True) -> Ran:
        started = time.monotonic()
        cwd = self.workdir / WORK
        try:
            await anyio.to_thread.run_sync(private_dir, cwd)
        except OSError as exc:
            raise _no_folder(cwd, exc) from None
        try:
            proc = await anyio.open_process(
                argv,
                stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=cwd,
                env=self.room.env(dict(self._env), call),
                start_new_session=True,
            )
        except OSError as exc:
            raise self._calls.failed(
                Unreachable(f"{argv[0]} could not start: {exc.strerror or exc}")
            ) from None
        try:
            return await _communicate(proc, call.prompt.encode("utf-8", "replace"), started)
        finally:
            await _end(proc)


async def _communicate(proc: Process, data: bytes, started: float) -> Ran:
    out, err = _Sink(MAX_STDOUT_BYTES, keep_tail=False), _Sink(MAX_STDERR_BYTES, keep_tail=True)
    async with anyio.create_task_group() as tg:
        if proc.stdin is not None:
            tg.start_soon(_feed, proc, data)
        assert proc.stdout is not None and proc.stderr is not None
        tg.start_soon(_drain, proc.stdout, out, proc)
        tg.start_soon(_drain, proc.stderr, err, None)
    code = await proc.wait()
    if out.cut:
        raise MalformedAnswer(
            f"the CLI printed more than {MAX_STDOUT_BYTES} bytes; stopped, nothing changed"
        )
    return Ran(code, out.data(), err.data(), time.monotonic() - started)


async def _feed(proc: Process, data: bytes) -> None:
    assert proc.stdin is not None
    try:
        await proc.stdin.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass  # it stopped reading (or ended): what it printed says why
    finally:
        await proc.stdin.aclose()


async def _drain(stream: ByteReceiveStream, sink: _Sink, proc: Process | None) -> None:
    async for chunk in stream:
        if not sink.add(chunk) and proc is not None:
            _signal_group(proc, signal.SIGKILL)
            return


async def _end(proc: Process) -> None:
    """The call's process group gone and its leader reaped. A CLI still running (memd's
    deadline or stop, a cancelled job) gets SIGTERM with its whole group, the leader the
    grace to exit; then the group gets SIGKILL, whatever the leader did, so nothing the CLI
    started outlives the call. The group's number cannot name another's meanwhile: Linux
    gives no process a number that a live group still uses, and the grace is far too short
    for the numbers to come round once the group is empty."""
    with anyio.CancelScope(shield=True):
        if proc.returncode is None:
            _signal_group(proc, signal.SIGTERM)
            with anyio.move_on_after(TERM_GRACE_S):
                await proc.wait()
        _signal_group(proc, signal.SIGKILL)
        await proc.wait()
        await proc.aclose()


def _signal_group(proc: Process, sig: signal.Signals) -> None:
    """Signal the call's process group (its own session: memd's pid is not in it)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _Sink:
    """Bytes up to a cap: the first ones (stdout) or the last ones (stderr)."""

    def __init__(self, cap: int, *, keep_tail: bool) -> None:
        self.cap = cap
        self.keep_tail = keep_tail
        self.chunks: list[bytes] = []
        self.size = 0
        self.cut = False

    def add(self, chunk: bytes) -> bool:
        self.chunks.append(chunk)
        self.size += len(chunk)
        if self.size <= self.cap:
            return True
        if self.keep_tail:
            joined = b"".join(self.chunks)[-self.cap :]
            self.chunks, self.size = [joined], len(joined)
            return True
        self.cut = True
        return False

    def data(self) -> bytes:
        return b"".join(self.chunks)


def open_room(
    room: Room, settings: CLIConfig, env: Mapping[str, str], install: str
) -> CLIBackend | Disabled:
    """The backend of ``room``'s CLI, or why it cannot run: not installed (``install`` says
    how to install it), or memd's private folder for it cannot be written."""
    command = find_command(settings.command, env, room.program)
    if command is None:
        where = settings.command or f"{room.program} on PATH"
        return Disabled(f"{install} ({where} not found), or set llm.{room.name}.command")
    workdir = model_calls_root(env) / room.name
    try:
        room.prepare(workdir)
    except OSError as exc:
        return Disabled(f"{room.name}: cannot write memd's folder {workdir}: {exc.strerror}")
    return CLIBackend(room, command=command, workdir=workdir, env=env, timeout_s=settings.timeout_s)


def _no_folder(where: Path, exc: OSError) -> LLMError:
    return Unavailable(f"cannot write memd's private folder for the CLI at {where}: {exc}")


def _not_logged_in(program: str) -> LLMError:
    from memd.errors import AuthenticationFailed

    return AuthenticationFailed(f"{program} is not logged in: run `{program}` and log in")
