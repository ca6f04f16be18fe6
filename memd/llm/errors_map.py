"""Classify Messages-API failures into memd's error tree (pure: no SDK, no I/O).

:mod:`memd.llm.client` pulls the status, error type, error code, message and ``retry-after``
headers out of an SDK exception and hands them to :func:`classify_status`; everything that
decides *which* :class:`~memd.errors.LLMError` a failure becomes lives here, so it is tested
without a network or the SDK.

What the API says, and what memd does with it:

* ``400 invalid_request_error`` "prompt is too long: 210000 tokens > 200000 maximum" and
  "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000" →
  :class:`PromptTooLong` with the figures; ``413 request_too_large`` (the body is over the
  byte limit) → :class:`PromptTooLong` without figures, since shrinking the prompt is the cure.
* "Your credit balance is too low …", "You have reached your specified API usage limits …",
  ``402 billing_error`` and the spend-limit error codes → :class:`QuotaExceeded`.
* ``429 rate_limit_error`` → :class:`RateLimited` carrying ``retry-after``.
* ``529`` or ``overloaded_error`` → :class:`Overloaded`; ``408``, ``5xx`` → :class:`Unavailable`.
* ``401``/``403`` → :class:`AuthenticationFailed`; any other ``4xx`` → :class:`BadRequest`.

The other backends' servers phrase the same failures their own way, and each room passes
them here too: OpenAI's and vLLM's "maximum context length is N tokens. However, you
requested M tokens", LM Studio's "keep the first M tokens … context length of only N",
llama.cpp's "exceeds the available context size", Gemini's "input token count (M) exceeds
the maximum number of tokens allowed (N)" (all :class:`PromptTooLong`); OpenAI's
``insufficient_quota`` 429 (:class:`QuotaExceeded`, not a rate limit); Gemini's statuses
(``UNAVAILABLE``, ``UNAUTHENTICATED``, ``PERMISSION_DENIED``) as their HTTP codes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

from memd.errors import (
    AuthenticationFailed,
    BadRequest,
    LLMError,
    Overloaded,
    PromptTooLong,
    QuotaExceeded,
    RateLimited,
    Unavailable,
)

_TOO_LONG = re.compile(
    r"prompt is too long:\s*(?P<actual>[\d,]+)\s*tokens?\s*>\s*(?P<limit>[\d,]+)", re.IGNORECASE
)
_EXCEEDS_CONTEXT = re.compile(
    r"input length and `?max_tokens`? exceed context limit:\s*"
    r"(?P<input>[\d,]+)\s*\+\s*(?P<output>[\d,]+)\s*>\s*(?P<limit>[\d,]+)",
    re.IGNORECASE,
)
# OpenAI's and vLLM's: "maximum context length is 4096 tokens. However, you requested 5000
# tokens (…)" / "… your messages resulted in 5000 tokens".
_MAX_CONTEXT = re.compile(
    r"maximum context length is\s*(?P<limit>[\d,]+)\s*tokens?.*?"
    r"(?:requested|resulted in)\s*(?P<actual>[\d,]+)\s*tokens?",
    re.IGNORECASE | re.DOTALL,
)
# LM Studio's: "Trying to keep the first 5000 tokens … context length of only 4096 tokens".
_KEEP_FIRST = re.compile(
    r"keep the first\s*(?P<actual>[\d,]+)\s*tokens.*?context length of only\s*"
    r"(?P<limit>[\d,]+)",
    re.IGNORECASE | re.DOTALL,
)
# Gemini's: "The input token count (1500000) exceeds the maximum number of tokens allowed
# (1048576)".
_INPUT_COUNT = re.compile(
    r"input token count\s*\(?(?P<actual>[\d,]+)\)?\s*exceeds the maximum number of tokens "
    r"allowed\s*\(?(?P<limit>[\d,]+)",
    re.IGNORECASE,
)
# Phrasings without figures: Bedrock's, llama.cpp's, and others when they state no numbers.
_TOO_LONG_BARE = re.compile(
    r"prompt is too long|input is too long|too many input tokens|exceeds the available "
    r"context size|context_length_exceeded|context length exceeded|context window",
    re.I,
)
_QUOTA = re.compile(
    r"credit balance is too low|reached your specified api usage limits|spend limit|"
    r"billing|purchase credits",
    re.IGNORECASE,
)
_QUOTA_CODES = frozenset(
    {
        "contract_spend_limit_reached",
        "enforced_spend_limit_reached",
        "linked_organization_spend_limit_reached",
        "linked_organization_billing_unavailable",
        "insufficient_quota",  # OpenAI: a 429 that waiting does not end
    }
)


def parse_prompt_too_long(message: str) -> tuple[int | None, int | None] | None:
    """``(actual, limit)`` if ``message`` says the prompt does not fit, else ``None``.

    Either figure is ``None`` when the message does not state it. For the
    "input + max_tokens exceed the context" phrasing, ``actual`` is the sum of both.
    """
    if match := _TOO_LONG.search(message):
        return _number(match["actual"]), _number(match["limit"])
    if match := _EXCEEDS_CONTEXT.search(message):
        return _number(match["input"]) + _number(match["output"]), _number(match["limit"])
    for pattern in (_MAX_CONTEXT, _KEEP_FIRST, _INPUT_COUNT):
        if match := pattern.search(message):
            return _number(match["actual"]), _number(match["limit"])
    if _TOO_LONG_BARE.search(message):
        return None, None
    return None


def parse_retry_after(headers: Mapping[str, str], *, now: float) -> float | None:
    """Seconds to wait as the server asked, from ``retry-after-ms`` or ``retry-after``.

    ``retry-after`` may be a number of seconds or an HTTP date (compared with ``now``, a
    POSIX timestamp). Unparseable or negative values give ``None``; a date in the past gives 0.
    """
    lowered = {key.lower(): value for key, value in headers.items()}
    millis = _float(lowered.get("retry-after-ms"))
    if millis is not None and millis >= 0:
        return millis / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    seconds = _float(raw)
    if seconds is not None:
        return seconds if seconds >= 0 else None
    try:
        when = parsedate_to_datetime(raw.strip())
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now)


def classify_status(
    status: int,
    *,
    error_type: str | None,
    error_code: str | None,
    message: str,
    retry_after: float | None,
) -> LLMError:
    """The memd error for an HTTP error answer of the Messages API.

    ``message`` is the API's own explanation (``error.message``), never anything holding
    credentials; it is kept in the error's text so logs say what the API said.
    """
    said = message.strip() or f"HTTP {status}"
    if status == 413 or error_type == "request_too_large":
        return PromptTooLong(f"the request is too large for the API ({status}): {said}")
    too_long = parse_prompt_too_long(f"{said} {error_code or ''}")
    if status in (400, 413, 422) and too_long is not None:
        actual, limit = too_long
        return PromptTooLong(
            f"the prompt does not fit the model: {said}", actual=actual, limit=limit
        )
    if _is_quota(status, error_type, error_code, said):
        return QuotaExceeded(f"the API account has no usable credit or hit its limit: {said}")
    if status == 429 or error_type == "rate_limit_error":
        return RateLimited(f"rate limited by the API ({status}): {said}", retry_after=retry_after)
    if status == 529 or error_type in ("overloaded_error", "UNAVAILABLE"):
        return Overloaded(f"the API is overloaded ({status}): {said}")
    if status in (401, 403) or error_type in (
        "authentication_error",
        "permission_error",
        "UNAUTHENTICATED",
        "PERMISSION_DENIED",
    ):
        return AuthenticationFailed(f"the API refused the credentials ({status}): {said}")
    if status == 408 or status >= 500:
        return Unavailable(f"the API failed to answer ({status}): {said}")
    return BadRequest(f"the API rejected the request ({status}): {said}")


def _is_quota(status: int, error_type: str | None, error_code: str | None, message: str) -> bool:
    if status == 402 or error_type == "billing_error" or error_code in _QUOTA_CODES:
        return True
    # Rate-limit answers mention "usage" too; only 4xx non-429 bodies are read for quota words.
    return 400 <= status < 500 and status != 429 and _QUOTA.search(message) is not None


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _float(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if value == value and value not in (float("inf"), float("-inf")) else None
