"""The context window of a Claude Code session, from the model it used (issue 38). Pure.

Claude Code records the model of every response: ``message.model`` (what answered) and, from
2.1.331 on, ``requestedModel`` (what it asked for, as its user named it: the long-context
form ``claude-sonnet-4-6[1m]`` is kept there, while the API sees ``claude-sonnet-4-6`` and a
``context-1m`` beta). A model switch shows in the next response. The window is Claude Code's
own, as 2.1.332's model table says (its binary, ``context: {window, native_1m,
supports_1m_suffix, maximum_window}`` per model, and ``/\\[1m\\]/i`` for the long form):

* a ``[1m]`` form: 1,000,000 tokens;
* a model whose window is 1M natively (Opus 4.7 and later, Sonnet 5 and later, Haiku 5.5,
  Fable, Mythos): 1,000,000;
* another Claude model (Sonnet 4.6 and Opus 4.6 without ``[1m]``, Haiku 4.5, Opus 4.5 and
  older, Claude 3): 200,000;
* anything else (a gateway's own model name): unknown; the config decides.

A dated id (``-20250929``), a provider's spelling (``us.anthropic.…-v1:0``, ``…@20250514``)
and letter case name the same model, as in Claude Code.
"""

from __future__ import annotations

import functools
import re

from memd.sources.base import ModelWindow

ONE_MILLION = 1_000_000
TWO_HUNDRED_K = 200_000
TABLE_VERSION = "2.1.332"
# Models whose window is 1M with no long-context form (2.1.332's table: native_1m).
NATIVE_1M = frozenset(
    {
        "claude-opus-4-7",
        "claude-opus-4-8",
        "claude-opus-5",
        "claude-opus-5-5",
        "claude-sonnet-5",
        "claude-sonnet-5-5",
        "claude-haiku-5-5",
        "claude-fable-5",
        "claude-fable-5-1",
        "claude-fable-5-2",
        "claude-mythos-5",
        "claude-mythos-5-1",
        "claude-mythos-5-2",
        "claude-mythos-preview",
    }
)
_LONG_FORM = re.compile(r"\[1m\]", re.IGNORECASE)
_PROVIDER_TAIL = re.compile(r"[@:].*$")  # Vertex's @date, Bedrock's :0
_VERSION_TAIL = re.compile(r"-v\d+$")  # Bedrock's -v1
_DATE_TAIL = re.compile(r"-\d{8}$")
_CLAUDE = re.compile(r"claude-[a-z0-9]+(?:-[a-z0-9]+)*")
MAX_NAME_CHARS = 200


def base_model(name: str) -> str | None:
    """The Claude model ``name`` spells, without ``[1m]``, a date or a provider's parts;
    None when it names no Claude model."""
    plain = _LONG_FORM.sub("", name[:MAX_NAME_CHARS]).strip().lower()
    start = plain.find("claude-")
    if start < 0:
        return None
    name = _PROVIDER_TAIL.sub("", plain[start:])
    name = _DATE_TAIL.sub("", _VERSION_TAIL.sub("", name))
    return name if _CLAUDE.fullmatch(name) else None


@functools.lru_cache(maxsize=64)  # status asks for each row it lists; a user has few models
def model_window(name: str) -> ModelWindow | None:
    """The window Claude Code gives a session of model ``name`` (see the module doc), or
    None when ``name`` is no Claude model."""
    base = base_model(name)
    if base is None:
        return None
    shown = name[:MAX_NAME_CHARS]
    if _LONG_FORM.search(shown):
        return ModelWindow(ONE_MILLION, f"{shown}: the long-context [1m] form")
    if base in NATIVE_1M:
        return ModelWindow(ONE_MILLION, f"{shown}: 1M natively (Claude Code {TABLE_VERSION})")
    return ModelWindow(TWO_HUNDRED_K, f"{shown}: 200K (Claude Code {TABLE_VERSION})")
