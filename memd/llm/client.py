"""The model seam: the :class:`LLM` protocol and its one real implementation over the SDK.

This is the only module that imports ``anthropic``, and it does so inside :func:`open_llm`:
the import costs ~1.5 s and ~48 MB, and the daemon must start without paying it. Nothing
outside :mod:`memd.llm` sees SDK types: replies are :class:`LLMReply` with plain-dict content
blocks, and every SDK failure leaves :meth:`AnthropicLLM.create_message` as a
:class:`memd.errors.LLMError` subclass (see :mod:`memd.llm.errors_map`).

The SDK never retries (``max_retries=0``): retrying and backing off is the cost guard's job.
Every call runs under a timeout, both the SDK's own and an overall deadline around it, and can
be cut short: :func:`stop_llm` (the daemon's shutdown) ends every call in flight at once and
refuses new ones, each with :class:`memd.errors.Unavailable`, so nothing waits on a slow API
for the grace period.
"""

from __future__ import annotations

import importlib.util
import logging
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, assert_never, cast

import anyio

from memd.config import LLMConfig
from memd.errors import AuthenticationFailed, LLMError, Unavailable, Unreachable
from memd.llm.errors_map import classify_status, parse_retry_after

if TYPE_CHECKING:
    import anthropic

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.anthropic.com"
# httpx's names for "no connection was made" (as opposed to one that broke mid-answer).
NO_CONNECTION = frozenset({"ConnectError", "ConnectTimeout", "UnsupportedProtocol"})


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
    sent back verbatim as the assistant turn of the next request."""

    id: str
    model: str
    content: list[dict[str, Any]]
    stop_reason: str | None
    usage: Usage

    @property
    def text(self) -> str:
        """The text blocks joined by blank lines."""
        return "\n\n".join(b["text"] for b in self.content if b.get("type") == "text")

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        return [b for b in self.content if b.get("type") == "tool_use"]


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
        """One non-streaming Messages-API call. Raises a :class:`memd.errors.LLMError`."""
        ...


class AnthropicLLM:
    """:class:`LLM` over an SDK client (``AsyncAnthropic``, ``…Bedrock`` or ``…Vertex``)."""

    def __init__(self, client: anthropic.AsyncAnthropic, *, timeout_s: float) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._deprecated = _sdk_deprecated_models()
        self._warned: set[str] = set()
        self.base_url = str(client.base_url).rstrip("/")
        # Since when no connection could be made (None: the last call connected), and why.
        self.unreachable_since: float | None = None
        self.unreachable_error: str | None = None
        self._calls: set[anyio.CancelScope] = set()  # the calls in flight, for stop()
        self._stopped: str | None = None  # why calls are refused (stop() was called)

    def __repr__(self) -> str:
        return f"AnthropicLLM(base_url={str(self._client.base_url)!r})"

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
        limit = self._timeout_s if timeout is None else timeout
        self._note_deprecated(model)
        params: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens}
        if system:
            params["system"] = system
        if tools:
            params["tools"] = tools
        started = time.monotonic()
        try:
            with self._stoppable(), anyio.fail_after(limit):
                message = await self._client.messages.create(**params, timeout=limit)
        except TimeoutError:
            raise Unavailable(f"the model call did not finish within {limit:g} s") from None
        except Exception as exc:
            mapped = self._failed(exc)
            if mapped is None:
                raise
            raise mapped from exc
        self.unreachable_since = self.unreachable_error = None
        reply = reply_from_message(message)
        log.debug(
            "%s answered in %.2f s: %d prompt + %d output tokens (%d read from cache)",
            model,
            time.monotonic() - started,
            reply.usage.prompt_tokens,
            reply.usage.output_tokens,
            reply.usage.cache_read_input_tokens,
        )
        return reply

    async def count_tokens(self, *, model: str, text: str, timeout: float) -> int:  # noqa: ASYNC109
        """A cheap, unbilled call (``/v1/messages/count_tokens``) that proves the key and
        the API (or the configured base URL) work. Raises an :class:`LLMError`."""
        try:
            with self._stoppable(), anyio.fail_after(timeout):
                counted = await self._client.messages.count_tokens(
                    model=model, messages=[{"role": "user", "content": text}], timeout=timeout
                )
        except TimeoutError:
            raise Unavailable(f"{self.base_url} did not answer within {timeout:g} s") from None
        except Exception as exc:
            mapped = self._failed(exc)
            if mapped is None:
                raise
            raise mapped from exc
        self.unreachable_since = self.unreachable_error = None
        return int(counted.input_tokens)

    @contextmanager
    def _stoppable(self) -> Iterator[None]:
        """Run one call so that :meth:`stop` can end it: then it raises ``Unavailable``."""
        if self._stopped is not None:
            raise Unavailable(self._stopped)
        with anyio.CancelScope() as scope:
            self._calls.add(scope)
            try:
                yield
            finally:
                self._calls.discard(scope)
        if scope.cancelled_caught:
            raise Unavailable(self._stopped or "the model call was cancelled")

    def stop(self, reason: str) -> None:
        """End every call in flight now and refuse new ones, each with ``Unavailable(reason)``
        (the daemon is stopping: nothing should wait on the API for its grace period)."""
        self._stopped = reason
        for scope in list(self._calls):
            scope.cancel()

    def _failed(self, exc: Exception) -> LLMError | None:
        """The memd error for a failed call; a connection failure names the URL and starts
        (or continues) the unreachable period shown in status."""
        mapped = translate_error(exc)
        if isinstance(mapped, Unreachable):
            mapped = Unreachable(
                f"could not reach the API at {self.base_url} ({mapped}); check the network and "
                "ANTHROPIC_BASE_URL / llm.base_url"
            )
            if self.unreachable_since is None:
                self.unreachable_since = time.time()
            self.unreachable_error = str(mapped)
        return mapped

    def _note_deprecated(self, model: str) -> None:
        if model in self._deprecated and model not in self._warned:
            self._warned.add(model)
            log.warning(
                "model %s is deprecated (end of life %s): name a newer one in llm.models",
                model,
                self._deprecated[model],
            )

    async def aclose(self) -> None:
        """Close the HTTP connection pool."""
        await self._client.close()


def stop_llm(llm: LLM | Disabled | None, reason: str) -> None:
    """End the calls in flight on ``llm`` and refuse new ones (see :meth:`AnthropicLLM.stop`;
    nothing for fakes, :class:`Disabled` or None)."""
    if isinstance(llm, AnthropicLLM):
        llm.stop(reason)


async def close_llm(llm: LLM | Disabled) -> None:
    """Release what :func:`open_llm` opened (nothing for fakes or :class:`Disabled`)."""
    if isinstance(llm, AnthropicLLM):
        await llm.aclose()


def open_llm(config: LLMConfig, env: Mapping[str, str]) -> LLM | Disabled:
    """The configured model client, or :class:`Disabled` saying what is missing.

    ``env`` is the process environment as read at the entry point; nothing else is
    consulted. Never raises for a missing key or package: the daemon runs without models.
    """
    match config.provider:
        case "anthropic":
            return _open_anthropic(config, env)
        case "bedrock":
            return _open_bedrock(config, env)
        case "vertex":
            return _open_vertex(config, env)
        case _:
            assert_never(config.provider)


def _open_anthropic(config: LLMConfig, env: Mapping[str, str]) -> LLM | Disabled:
    api_key = env.get(config.api_key_env, "").strip()
    if not api_key:
        return Disabled(
            f"no API key: set {config.api_key_env} in the daemon's environment "
            "(or llm.api_key_env in the config to name another variable)"
        )
    try:
        import anthropic
    except ImportError:
        return Disabled("the 'anthropic' package is not installed: pip install anthropic")
    client = anthropic.AsyncAnthropic(
        api_key=api_key,
        base_url=config.base_url or env.get("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL,
        max_retries=0,
        timeout=config.timeout_s,
    )
    return AnthropicLLM(client, timeout_s=config.timeout_s)


def _open_bedrock(config: LLMConfig, env: Mapping[str, str]) -> LLM | Disabled:
    bearer = env.get("AWS_BEARER_TOKEN_BEDROCK") or None
    # Without a Bedrock API key the SDK signs requests with boto3.
    if not _installed("anthropic") or (bearer is None and not _installed("boto3")):
        return Disabled(
            "Bedrock needs extra packages (or AWS_BEARER_TOKEN_BEDROCK): "
            "pip install 'anthropic[bedrock]'"
        )
    import anthropic

    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    try:
        client = anthropic.AsyncAnthropicBedrock(
            api_key=bearer,
            aws_region=region or None,
            aws_profile=None if bearer else env.get("AWS_PROFILE") or None,
            base_url=config.base_url or None,
            max_retries=0,
            timeout=config.timeout_s,
        )
    except (ValueError, anthropic.AnthropicError) as exc:
        return Disabled(f"Bedrock is not configured: {exc}")
    return AnthropicLLM(cast("anthropic.AsyncAnthropic", client), timeout_s=config.timeout_s)


def _open_vertex(config: LLMConfig, env: Mapping[str, str]) -> LLM | Disabled:
    if not _installed("anthropic") or not _installed("google.auth"):
        return Disabled("Vertex AI needs extra packages: pip install 'anthropic[vertex]'")
    import anthropic

    region = env.get("CLOUD_ML_REGION")
    if not region:
        return Disabled("Vertex AI is not configured: set CLOUD_ML_REGION (e.g. us-east5)")
    try:
        client = anthropic.AsyncAnthropicVertex(
            region=region,
            project_id=env.get("ANTHROPIC_VERTEX_PROJECT_ID") or anthropic.NOT_GIVEN,
            base_url=config.base_url or None,
            max_retries=0,
            timeout=config.timeout_s,
        )
    except (ValueError, anthropic.AnthropicError) as exc:
        return Disabled(f"Vertex AI is not configured: {exc}")
    return AnthropicLLM(cast("anthropic.AsyncAnthropic", client), timeout_s=config.timeout_s)


def _sdk_deprecated_models() -> dict[str, str]:
    """The SDK's table of deprecated models; it warns through ``warnings`` on every call,
    which we silence and replace with one log line per model (see ``_note_deprecated``)."""
    warnings.filterwarnings(
        "ignore", message=r"The model '.*' is deprecated", category=DeprecationWarning
    )
    try:
        from anthropic.resources.messages import messages
    except ImportError:  # pragma: no cover - the table moved in another SDK version
        return {}
    table = getattr(messages, "DEPRECATED_MODELS", {})
    return {str(k): str(v) for k, v in table.items()} if isinstance(table, dict) else {}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # the parent package is missing
        return False


def translate_error(exc: BaseException) -> LLMError | None:
    """The memd error for an SDK exception; ``None`` if ``exc`` is not from the SDK.

    The one place SDK errors are mapped. Messages hold what the API said, never credentials.
    """
    import anthropic

    if isinstance(exc, anthropic.APITimeoutError):
        return Unavailable("the model call timed out")
    if isinstance(exc, anthropic.APIConnectionError):
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else ""
        if cause in NO_CONNECTION or not cause:
            return Unreachable(cause or "no connection")
        return Unavailable(f"the connection to the API failed: {cause}")
    if isinstance(exc, anthropic.APIStatusError):
        return classify_status(
            exc.status_code,
            error_type=exc.type,
            error_code=exc.error_code,
            message=exc.api_message or _body_text(exc.body),
            retry_after=parse_retry_after(dict(exc.response.headers), now=time.time()),
        )
    if isinstance(exc, anthropic.APIResponseValidationError):
        return Unavailable(f"the API answered with an unexpected body ({exc.status_code})")
    if isinstance(exc, anthropic.CredentialsError):
        return AuthenticationFailed(f"the provider's credentials cannot be loaded: {exc}")
    if isinstance(exc, anthropic.AnthropicError):
        return Unavailable(f"the model call failed: {type(exc).__name__}")
    return None


def reply_from_message(message: Any) -> LLMReply:
    """Plain data from an SDK ``Message`` (decode boundary: ``Any`` stops here)."""
    usage = message.usage
    return LLMReply(
        id=str(message.id),
        model=str(message.model),
        content=[_block(b.model_dump(mode="json", exclude_none=True)) for b in message.content],
        stop_reason=message.stop_reason,
        usage=Usage(
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
            cache_creation_input_tokens=usage.cache_creation_input_tokens or 0,
            cache_read_input_tokens=usage.cache_read_input_tokens or 0,
        ),
    )


_REQUEST_FIELDS: dict[str, tuple[str, ...]] = {
    "text": ("type", "text"),
    "tool_use": ("type", "id", "name", "input"),
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
}


def _block(raw: dict[str, Any]) -> dict[str, Any]:
    """Keep only the fields a request accepts, so a reply can be replayed as history."""
    fields = _REQUEST_FIELDS.get(str(raw.get("type")))
    if fields is None:
        return raw
    return {key: raw[key] for key in fields if key in raw}


def _body_text(body: object) -> str:
    if isinstance(body, str):
        return body[:500]
    return ""
