"""The Anthropic room: the Messages API through the ``anthropic`` SDK (directly, or Bedrock's
and Vertex AI's clients of the same SDK).

The only module that imports ``anthropic``, inside the openers: the import costs ~1.5 s and
~48 MB, and the daemon must start without paying it. Every SDK failure leaves
:meth:`AnthropicLLM.create_message` through :func:`translate_error` as a
:class:`memd.errors.LLMError` subclass (classified by :mod:`memd.llm.errors_map`).
"""

from __future__ import annotations

import importlib.util
import logging
import time
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from memd.config_llm import LLMConfig
from memd.errors import AuthenticationFailed, LLMError, Unavailable, Unreachable
from memd.llm.client import BackendFacts, Calls, Disabled, LLMReply, Usage
from memd.llm.errors_map import classify_status, parse_retry_after

if TYPE_CHECKING:
    import anthropic

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.anthropic.com"
KEY_ENV = "ANTHROPIC_API_KEY"
# httpx's names for "no connection was made" (as opposed to one that broke mid-answer).
NO_CONNECTION = frozenset({"ConnectError", "ConnectTimeout", "UnsupportedProtocol"})


class AnthropicLLM:
    """:class:`~memd.llm.client.Backend` over an SDK client (``AsyncAnthropic``, ``…Bedrock``
    or ``…Vertex``)."""

    def __init__(
        self, client: anthropic.AsyncAnthropic, *, timeout_s: float, name: str = "anthropic"
    ) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._deprecated = _sdk_deprecated_models()
        self._warned: set[str] = set()
        self.name = name
        self.base_url = str(client.base_url).rstrip("/")
        self._calls = Calls(
            self.base_url, "check the network and ANTHROPIC_BASE_URL / llm.base_url"
        )

    def __repr__(self) -> str:
        return f"AnthropicLLM(base_url={str(self._client.base_url)!r})"

    @property
    def unreachable_since(self) -> float | None:
        return self._calls.unreachable_since

    @property
    def unreachable_error(self) -> str | None:
        return self._calls.unreachable_error

    def facts(self) -> BackendFacts:
        return BackendFacts(
            self.name, self.base_url, True, True, self.unreachable_since, self.unreachable_error
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
        limit = self._timeout_s if timeout is None else timeout
        self._note_deprecated(model)
        params: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens}
        if system:
            params["system"] = system
        if tools:
            params["tools"] = tools
        started = time.monotonic()
        try:
            with self._calls.call(limit):
                message = await self._client.messages.create(**params, timeout=limit)
        except LLMError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        reply = reply_from_message(message, self.name, time.monotonic() - started)
        log.debug(
            "%s answered in %.2f s: %d prompt + %d output tokens (%d read from cache)",
            model,
            reply.seconds,
            reply.usage.prompt_tokens,
            reply.usage.output_tokens,
            reply.usage.cache_read_input_tokens,
        )
        return reply

    async def count_tokens(self, *, model: str, text: str, timeout: float) -> int:  # noqa: ASYNC109
        """A cheap, unbilled call (``/v1/messages/count_tokens``) that proves the key and
        the API (or the configured base URL) work. Raises an :class:`LLMError`."""
        try:
            with self._calls.call(timeout):
                counted = await self._client.messages.count_tokens(
                    model=model, messages=[{"role": "user", "content": text}], timeout=timeout
                )
        except LLMError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        return int(counted.input_tokens)

    async def probe(self, *, model: str, timeout: float) -> str:  # noqa: ASYNC109
        counted = await self.count_tokens(model=model, text="ping", timeout=timeout)
        return f"{self.base_url} answered a token count for {model} ({counted} tokens)"

    def stop(self, reason: str) -> None:
        """End every call in flight now and refuse new ones, each with ``Unavailable(reason)``
        (the daemon is stopping: nothing should wait on the API for its grace period)."""
        self._calls.stop(reason)

    def _failed(self, exc: Exception) -> Exception:
        """The memd error for a failed call (``exc`` itself when it is not the SDK's)."""
        mapped = translate_error(exc)
        return exc if mapped is None else self._calls.failed(mapped)

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


def open_anthropic(config: LLMConfig, env: Mapping[str, str]) -> AnthropicLLM | Disabled:
    key_env = config.api_key_env or KEY_ENV
    api_key = env.get(key_env, "").strip()
    if not api_key:
        return Disabled(
            f"no API key: set {key_env} in the daemon's environment "
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


def open_bedrock(config: LLMConfig, env: Mapping[str, str]) -> AnthropicLLM | Disabled:
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
    return AnthropicLLM(
        cast("anthropic.AsyncAnthropic", client), timeout_s=config.timeout_s, name="bedrock"
    )


def open_vertex(config: LLMConfig, env: Mapping[str, str]) -> AnthropicLLM | Disabled:
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
    return AnthropicLLM(
        cast("anthropic.AsyncAnthropic", client), timeout_s=config.timeout_s, name="vertex"
    )


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

    The one place the Anthropic SDK's errors are mapped. Messages hold what the API said,
    never credentials.
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


def reply_from_message(message: Any, backend: str = "anthropic", seconds: float = 0.0) -> LLMReply:
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
        backend=backend,
        seconds=seconds,
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
