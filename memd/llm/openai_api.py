"""The OpenAI-compatible room: any Chat Completions server (OpenAI, Ollama, vLLM, llama.cpp's
server, LM Studio, OpenRouter) through the ``openai`` SDK. Two backends live here: ``openai``
(``llm.provider: openai``, ``llm.base_url``, key from ``OPENAI_API_KEY``) and ``local`` (the
server :mod:`memd.llm.local_probe` found on a default port, or ``llm.local.base_url``).

The only module that imports ``openai``, inside the openers (after READY, in a worker
thread). Requests and answers are mapped by :mod:`memd.llm.openai_wire`; every SDK failure
leaves through :func:`translate_error` as a :class:`memd.errors.LLMError` subclass. A server
on this machine needs no key and costs no money (its replies say ``priced=False``).

Answers are streamed by default (``llm.<backend>.stream``): a slow local model keeps the
connection busy rather than silent, and a stream that ends before the server said how the
answer finished is an :class:`~memd.errors.Unavailable` (retried after a back-off), never a
half answer taken as whole.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from memd.config_llm import LLMConfig
from memd.errors import AuthenticationFailed, LLMError, Unavailable, Unreachable
from memd.llm.backends import is_loopback, settings_for
from memd.llm.client import BackendFacts, Calls, Disabled, LLMReply
from memd.llm.errors_map import classify_status, parse_retry_after
from memd.llm.openai_wire import StreamedAnswer, chat_request, reply_from_chat

if TYPE_CHECKING:
    import openai

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
NO_CONNECTION = frozenset({"ConnectError", "ConnectTimeout", "UnsupportedProtocol"})
LOCAL_KEY = "memd-local"  # a server on this machine needs none; the SDK wants one


class OpenAILLM:
    """:class:`~memd.llm.client.Backend` over ``openai.AsyncOpenAI``."""

    def __init__(
        self, client: openai.AsyncOpenAI, *, name: str, timeout_s: float, stream: bool
    ) -> None:
        self._client = client
        self._timeout_s = timeout_s
        self._stream = stream
        self.name = name
        self.base_url = str(client.base_url).rstrip("/")
        self.priced = not is_loopback(self.base_url)
        # OpenAI's own models take max_completion_tokens; other servers know max_tokens.
        self._limit_name = (
            "max_completion_tokens" if "api.openai.com" in self.base_url else "max_tokens"
        )
        hint = f"check that the server runs and llm.{name}.base_url / llm.base_url"
        self._calls = Calls(self.base_url, hint)

    def __repr__(self) -> str:
        return f"OpenAILLM(name={self.name!r}, base_url={self.base_url!r})"

    def facts(self) -> BackendFacts:
        calls = self._calls
        return BackendFacts(
            self.name,
            self.base_url,
            True,
            self.priced,
            calls.unreachable_since,
            calls.unreachable_error,
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
        params = chat_request(
            model=model,
            system=system,
            messages=messages,
            max_tokens=max_tokens,
            tools=tools,
            limit_name=self._limit_name,
        )
        started = time.monotonic()
        try:
            with self._calls.call(limit):
                if self._stream:
                    answer = await self._streamed(params, limit)
                    reply = answer.reply(self.name, time.monotonic() - started, self.priced)
                else:
                    raw = await self._client.chat.completions.create(**params, timeout=limit)
                    data = raw.model_dump(mode="json")
                    reply = reply_from_chat(
                        data, self.name, time.monotonic() - started, self.priced
                    )
        except LLMError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        log.debug(
            "%s on %s answered in %.2f s: %d prompt + %d output tokens",
            model,
            self.name,
            reply.seconds,
            reply.usage.prompt_tokens,
            reply.usage.output_tokens,
        )
        return reply

    async def _streamed(self, params: dict[str, Any], limit: float) -> StreamedAnswer:
        answer = StreamedAnswer()
        stream = await self._client.chat.completions.create(
            **params, stream=True, stream_options={"include_usage": True}, timeout=limit
        )
        try:
            async for chunk in stream:
                answer.add(chunk.model_dump(mode="json"))
        finally:
            await stream.close()
        if not answer.complete:
            raise Unavailable("the answer's stream ended before the server said it was complete")
        return answer

    async def probe(self, *, model: str, timeout: float) -> str:  # noqa: ASYNC109
        """``GET /models``: no tokens spent, and it proves the key and the URL."""
        try:
            with self._calls.call(timeout):
                page = await self._client.models.list(timeout=timeout)
                listed = [m.id for m in page.data]
        except LLMError:
            raise
        except Exception as exc:
            raise self._failed(exc) from exc
        has = "lists it" if model in listed else f"does not list it ({len(listed)} models)"
        return f"{self.base_url} answers; {model} is the model asked for, and the server {has}"

    def stop(self, reason: str) -> None:
        self._calls.stop(reason)

    async def aclose(self) -> None:
        await self._client.close()

    def _failed(self, exc: Exception) -> Exception:
        mapped = translate_error(exc)
        return exc if mapped is None else self._calls.failed(mapped)


def open_openai(config: LLMConfig, env: Mapping[str, str]) -> OpenAILLM | Disabled:
    """The ``openai`` backend: ``llm.base_url`` (or ``OPENAI_BASE_URL``, else OpenAI's)."""
    base_url = config.base_url or env.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    return _open("openai", base_url, config, env)


def open_local(config: LLMConfig, env: Mapping[str, str]) -> OpenAILLM | Disabled:
    """The ``local`` backend: the server found on a default port, or ``llm.local.base_url``."""
    base_url = settings_for("local", config).base_url
    if not base_url:
        return Disabled("no local model server found; set llm.local.base_url")
    return _open("local", base_url, config, env)


def _open(
    name: str, base_url: str, config: LLMConfig, env: Mapping[str, str]
) -> OpenAILLM | Disabled:
    settings = settings_for(name, config)
    key_env = config.api_key_env or settings.api_key_env
    api_key = env.get(key_env, "").strip() if key_env else ""
    if not api_key and not is_loopback(base_url):
        return Disabled(
            f"no API key: set {key_env or 'OPENAI_API_KEY'} in the daemon's environment for "
            f"{base_url} (a server on this machine needs none)"
        )
    try:
        import openai
    except ImportError:
        return Disabled("the 'openai' package is not installed: pip install openai")
    client = openai.AsyncOpenAI(
        api_key=api_key or LOCAL_KEY,
        base_url=base_url,
        max_retries=0,
        timeout=config.timeout_s,
    )
    return OpenAILLM(client, name=name, timeout_s=config.timeout_s, stream=settings.stream)


def translate_error(exc: BaseException) -> LLMError | None:
    """The memd error for an ``openai`` SDK exception (or a stream that broke off); ``None``
    if ``exc`` is neither. The one place this room's failures are mapped."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return Unavailable("the model call timed out")
    if isinstance(exc, openai.APIConnectionError):
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else ""
        if cause in NO_CONNECTION or not cause:
            return Unreachable(cause or "no connection")
        return Unavailable(f"the connection to the server failed: {cause}")
    if isinstance(exc, openai.APIStatusError):
        error = _error_body(exc.body)
        return classify_status(
            exc.status_code,
            error_type=_str(error.get("type")),
            error_code=_str(error.get("code")),
            message=_str(error.get("message")) or str(exc.message)[:500],
            retry_after=parse_retry_after(dict(exc.response.headers), now=time.time()),
        )
    if isinstance(exc, openai.APIResponseValidationError):
        return Unavailable(f"the server answered with an unexpected body ({exc.status_code})")
    if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
        return AuthenticationFailed(f"the server refused the credentials: {exc}")
    if isinstance(exc, openai.APIError):
        return Unavailable(f"the model call failed: {type(exc).__name__}: {str(exc)[:300]}")
    if type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "h11"):
        return Unavailable(f"the answer's stream broke off ({type(exc).__name__})")
    if isinstance(exc, ValueError | KeyError | TypeError):  # a chunk that is not JSON
        return Unavailable(f"the server's answer could not be read ({type(exc).__name__})")
    return None


def _error_body(body: object) -> dict[str, Any]:
    """``{"error": {…}}`` (OpenAI's shape) or the body itself (some servers' flat shape)."""
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict):
            return inner
        if isinstance(inner, str):
            return {"message": inner}
        return body
    if isinstance(body, str):
        return {"message": body[:500]}
    return {}


def _str(value: object) -> str | None:
    return value[:500] if isinstance(value, str) else None if value is None else str(value)[:100]
