"""The Gemini room: the Gemini API through Google's ``google-genai`` SDK (``llm.provider:
gemini``, key from ``GEMINI_API_KEY``, ``llm.gemini.base_url`` or ``llm.base_url`` for a
gateway).

The only module that imports ``google.genai``, inside the opener (after READY, in a worker
thread). Requests and answers are mapped by :mod:`memd.llm.gemini_wire`; every failure leaves
through :func:`translate_error` as a :class:`memd.errors.LLMError` (a 429's
``google.rpc.RetryInfo`` delay is its retry-after). The SDK's own retries are off: backing
off is the cost guard's job. Streamed by default (``llm.gemini.stream``): a stream that ends
before a finish reason is :class:`~memd.errors.Unavailable`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memd.config_llm import LLMConfig
from memd.errors import LLMError, Unavailable, Unreachable
from memd.llm.backends import settings_for
from memd.llm.client import BackendFacts, Calls, Disabled, LLMReply
from memd.llm.errors_map import classify_status
from memd.llm.gemini_wire import GeminiAnswer, error_text, gemini_request, retry_delay

if TYPE_CHECKING:
    from google import genai

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"
NO_CONNECTION = frozenset({"ConnectError", "ConnectTimeout", "UnsupportedProtocol"})


class GeminiLLM:
    """:class:`~memd.llm.client.Backend` over ``genai.Client``'s async side."""

    name = "gemini"

    def __init__(
        self, client: genai.Client, *, base_url: str, timeout_s: float, stream: bool
    ) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._stream = stream
        self.base_url = base_url.rstrip("/")
        self._calls = Calls(self.base_url, "check the network and llm.gemini.base_url")

    def __repr__(self) -> str:
        return f"GeminiLLM(base_url={self.base_url!r})"

    def facts(self) -> BackendFacts:
        since, error = self._calls.unreachable_since, self._calls.unreachable_error
        return BackendFacts(self.name, self.base_url, True, True, since, error)

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
        from google.genai import types

        contents, config = gemini_request(
            system=system, messages=messages, max_tokens=max_tokens, tools=tools
        )
        config["http_options"] = types.HttpOptions(timeout=int(limit * 1000))
        started = time.monotonic()
        answer = GeminiAnswer()
        models = self._client.aio.models
        try:
            with self._calls.call(limit):
                if self._stream:
                    stream = await models.generate_content_stream(
                        model=model, contents=contents, config=types.GenerateContentConfig(**config)
                    )
                    async for chunk in stream:
                        answer.add(chunk.model_dump(mode="json", exclude_none=True))
                    if not answer.complete:
                        raise Unavailable(
                            "the answer's stream ended before the server said it was complete"
                        )
                else:
                    whole = await models.generate_content(
                        model=model, contents=contents, config=types.GenerateContentConfig(**config)
                    )
                    answer.add(whole.model_dump(mode="json", exclude_none=True))
        except LLMError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        answer.model = answer.model or model
        return answer.reply(self.name, time.monotonic() - started, True)

    async def probe(self, *, model: str, timeout: float) -> str:  # noqa: ASYNC109
        """``countTokens``: unbilled, and it proves the key, the URL and the model name."""
        from google.genai import types

        try:
            with self._calls.call(timeout):
                counted = await self._client.aio.models.count_tokens(
                    model=model,
                    contents="ping",
                    config=types.CountTokensConfig(
                        http_options=types.HttpOptions(timeout=int(timeout * 1000))
                    ),
                )
        except LLMError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        return f"{self.base_url} answered a token count for {model} ({counted.total_tokens} tokens)"

    def stop(self, reason: str) -> None:
        self._calls.stop(reason)

    async def aclose(self) -> None:
        await self._client.aio.aclose()

    def _failed(self, exc: Exception) -> Exception:
        mapped = translate_error(exc)
        return exc if mapped is None else self._calls.failed(mapped)


def open_gemini(config: LLMConfig, env: Mapping[str, str]) -> GeminiLLM | Disabled:
    settings = settings_for("gemini", config)
    key_env = config.api_key_env or settings.api_key_env
    api_key = env.get(key_env, "").strip()
    if not api_key:
        return Disabled(f"no API key: set {key_env} in the daemon's environment")
    try:
        from google import genai
        from google.genai import types
    except ImportError:
        return Disabled("the 'google-genai' package is not installed: pip install google-genai")
    base_url = config.base_url or DEFAULT_BASE_URL
    options: dict[str, Any] = {
        "base_url": base_url,
        "timeout": int(config.timeout_s * 1000),
        "retry_options": {"attempts": 1},
    }
    try:
        client = genai.Client(
            api_key=api_key, vertexai=False, http_options=types.HttpOptions(**options)
        )
    except (ValueError, TypeError) as exc:
        return Disabled(f"the Gemini API is not configured: {exc}")
    return GeminiLLM(client, base_url=base_url, timeout_s=config.timeout_s, stream=settings.stream)


def translate_error(exc: BaseException) -> LLMError | None:
    """The memd error for a ``google-genai`` failure (or its HTTP layer's); ``None`` if
    ``exc`` is neither. The one place this room's failures are mapped."""
    from google.genai import errors

    if isinstance(exc, errors.APIError):
        details = exc.details
        return classify_status(
            int(exc.code or 0),
            error_type=exc.status if isinstance(exc.status, str) else None,
            error_code=None,
            message=exc.message if isinstance(exc.message, str) else error_text(details),
            retry_after=retry_delay(details) if int(exc.code or 0) == 429 else None,
        )
    name = type(exc).__name__
    if type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "h11", "aiohttp"):
        if name in NO_CONNECTION:
            return Unreachable(name)
        if "Timeout" in name:
            return Unavailable("the model call timed out")
        return Unavailable(f"the connection to the API failed: {name}")
    if isinstance(exc, errors.UnknownApiResponseError | ValueError | KeyError | TypeError):
        return Unavailable(f"the API's answer could not be read ({name})")
    return None
