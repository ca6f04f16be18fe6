"""The model seam: the :class:`LLM` protocol every backend speaks, and what they share.

A backend is one room (``memd/llm/<name>_api.py``, or a subprocess for an agent's CLI) that
turns memd's one request shape into its API's and the answer back. The request is the
Messages API's shape, which memd's jobs already build: ``system``, ``messages`` of
``user``/``assistant`` turns whose content blocks are plain dicts (``text``, ``tool_use``,
``tool_result``), ``tools`` as ``{name, description, input_schema}``. The answer is an
:class:`LLMReply` with plain-dict blocks of the same kinds. Nothing outside a room sees an
SDK's types; every failure leaves a room as a :class:`memd.errors.LLMError` subclass, mapped
at that room's one seam (:mod:`memd.llm.errors_map` holds the pure classification).

A backend that cannot drive a tool loop (a small local model, an agent CLI run headless)
says so in :attr:`BackendFacts.tools`; jobs then ask it for one whole answer that memd
checks and applies itself (:mod:`memd.llm.models` decides the protocol per job).

SDKs never retry (retrying and backing off is the cost guard's job). Every call runs under
an overall deadline and can be cut short: :meth:`Calls.stop` (the daemon's shutdown) ends
every call in flight at once and refuses new ones with :class:`memd.errors.Unavailable`.
Importing an SDK costs ~0.6-1.5 s: each room imports its SDK inside its opener, after READY.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import anyio

from memd.errors import LLMError, Unavailable, Unreachable


class TokenCounts(Protocol):
    """The four figures of one API response's usage (:class:`Usage` fits; so do
    test doubles)."""

    @property
    def input_tokens(self) -> int: ...
    @property
    def output_tokens(self) -> int: ...
    @property
    def cache_creation_input_tokens(self) -> int: ...
    @property
    def cache_read_input_tokens(self) -> int: ...


@dataclass(frozen=True)
class Usage:
    """Tokens one call was billed for, as the API reports them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def prompt_tokens(self) -> int:
        """Everything the prompt held: uncached input plus cache writes and reads."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_creation_input_tokens + other.cache_creation_input_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
        )


@dataclass(frozen=True)
class LLMReply:
    """One assistant message. ``content`` holds request-ready blocks (plain dicts) that can be
    sent back verbatim as the assistant turn of the next request.

    ``stop_reason`` uses the Messages API's words whatever the backend: ``end_turn``,
    ``tool_use``, ``max_tokens`` (the answer was cut short). ``backend`` names the room that
    answered, ``seconds`` how long the call took, ``priced`` whether it costs money (a local
    server does not: its tokens are shown, not billed)."""

    id: str
    model: str
    content: list[dict[str, Any]]
    stop_reason: str | None
    usage: Usage
    backend: str = ""
    seconds: float = 0.0
    priced: bool = True

    @property
    def text(self) -> str:
        """The text blocks joined by blank lines."""
        return "\n\n".join(b["text"] for b in self.content if b.get("type") == "text")

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for b in self.content if b.get("type") == "tool_use"]

    @property
    def cut_short(self) -> bool:
        """The answer stopped at its output limit (or the stream ended early)."""
        return self.stop_reason == "max_tokens"


@dataclass(frozen=True)
class Disabled:
    """Model calls are unavailable; ``reason`` says why and how to fix it (shown in status)."""

    reason: str


class LLM(Protocol):
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
        """One model call in the Messages API's shape. Raises a :class:`memd.errors.LLMError`."""
        ...


# The longest one backend's probe (``memdctl doctor``) takes: an agent CLI's ``--version`` is
# its whole start, 1-3 s on an idle machine but 26-35 s for Gemini CLI 0.61 at a load of 8 per
# core; a network probe is given far less (the doctor's own limit).
PROBE_MAX_S = 60.0


@dataclass(frozen=True)
class BackendFacts:
    """What ``status`` and ``doctor`` say about one opened backend."""

    name: str  # the backend's name: "anthropic", "openai", "gemini", "local", …
    where: str  # its base URL (or the command it runs)
    tools: bool  # its models can drive the multi-turn tool loop
    priced: bool  # its calls cost money (a local server's do not)
    unreachable_since: float | None = None  # wall time the last call could not connect
    last_error: str | None = None


@runtime_checkable
class Closable(Protocol):
    """What the daemon stops and closes at shutdown (a backend, or every job's backends)."""

    def stop(self, reason: str) -> None:
        """End every call in flight now and refuse new ones (the daemon is stopping)."""
        ...

    async def aclose(self) -> None:
        """Release connections (or processes)."""
        ...


@runtime_checkable
class Backend(LLM, Closable, Protocol):
    """An opened backend: the :class:`LLM` calls plus what the daemon needs to run it."""

    def facts(self) -> BackendFacts: ...

    async def probe(self, *, model: str, timeout: float) -> str:  # noqa: ASYNC109
        """A cheap call that proves the backend answers (``memdctl doctor``); what answered,
        in words. Raises an :class:`LLMError`."""
        ...


@dataclass
class Calls:
    """The calls in flight of one backend: each runs under a deadline and can be stopped;
    a connection failure starts the unreachable period ``status`` shows. Rooms compose it."""

    where: str
    hint: str = ""  # what to check when the backend cannot be reached
    unreachable_since: float | None = None
    unreachable_error: str | None = None
    _scopes: set[anyio.CancelScope] = field(default_factory=set)
    _stopped: str | None = None

    @contextmanager
    def call(self, limit: float) -> Iterator[None]:
        """Run one call within ``limit`` seconds so that :meth:`stop` can end it; a timeout
        or a stop raises ``Unavailable``. A call that returns marks the backend reachable."""
        if self._stopped is not None:
            raise Unavailable(self._stopped)
        with anyio.CancelScope() as scope:
            self._scopes.add(scope)
            try:
                with anyio.fail_after(limit):
                    yield
            except TimeoutError:
                raise Unavailable(f"the model call did not finish within {limit:g} s") from None
            finally:
                self._scopes.discard(scope)
        if scope.cancelled_caught:
            raise Unavailable(self._stopped or "the model call was cancelled")
        self.unreachable_since = self.unreachable_error = None

    def stop(self, reason: str) -> None:
        self._stopped = reason
        for scope in list(self._scopes):
            scope.cancel()

    def failed(self, mapped: LLMError) -> LLMError:
        """``mapped`` as raised: a connection failure names the URL and what to check, and
        starts (or continues) the unreachable period."""
        if not isinstance(mapped, Unreachable):
            return mapped
        said = f"could not reach the API at {self.where} ({mapped})"
        mapped = Unreachable(f"{said}; {self.hint}" if self.hint else said)
        if self.unreachable_since is None:
            self.unreachable_since = time.time()
        self.unreachable_error = str(mapped)
        return mapped


def stop_llm(llm: object, reason: str) -> None:
    """End the calls in flight on ``llm`` and refuse new ones (nothing for fakes, ``Disabled``
    or None)."""
    if isinstance(llm, Closable):
        llm.stop(reason)


async def close_llm(llm: object) -> None:
    """Release what an opener opened (nothing for fakes or :class:`Disabled`)."""
    if isinstance(llm, Closable):
        await llm.aclose()
