"""What the loopback server answers: replies, fault builders, rules and the script format.

A :data:`Reply` is one of

* :class:`Message` — a 200 answer with content blocks (see :func:`text`, :func:`tool_use`);
* :class:`ApiError` — an error answer in the API's shape (see :func:`overloaded`,
  :func:`rate_limited`, :func:`server_error`, :func:`api_error`);
* :class:`Drop` — the connection is closed without an answer.

Any reply can be delayed with ``delay_s``.

Script files (``python -m memd.testing.loopback_process --script FILE``) hold JSON lines, each one
entry; blank lines and lines starting with ``#`` are skipped::

    {"reply": {"text": "Done."}}                         # queued: answers one request, in order
    {"reply": {"tool_use": {"name": "Read", "input": {"file_path": "/x"}}}}
    {"reply": {"error": {"status": 529}}}                  # an overloaded answer
    {"reply": {"drop": true}}                               # close the connection
    {"when": {"tool": "Edit", "turn": "first", "match": "notes file (?P<path>\\S+)"},
     "reply": {"tool_use": {"name": "Edit", "input": {"file_path": "{path}",
               "old_string": "", "new_string": "# Notes"}}}}  # a rule: every match
    {"when": {"turn": "after_tool"}, "reply": {"text": "Done."}, "times": 3}

A reply object holds one of ``text``, ``tool_use`` (one call), ``tool_uses`` (a list),
``error`` (``status``, optional ``type``, ``message``, ``retry_after``, ``code``) or
``drop``; ``text`` may go with ``tool_use(s)`` as a preamble; ``delay_s`` and
``stop_reason`` are optional.
A rule's ``when`` holds any of: ``tool`` (the request offers a tool of that name), ``match``
(a regex searched in the text of the last user message; its named groups fill ``{name}``
placeholders in the reply's strings), ``system_match`` (a regex on the system prompt),
``model`` (exact name) and ``turn`` (``"first"``: the last user message holds no
tool_result; ``"after_tool"``: it does). Rules are tried in file order before the queue;
``times`` caps how often a rule answers.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

_ids = itertools.count(1)

STATUS_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class Message:
    content: tuple[dict[str, Any], ...]
    stop_reason: str = "end_turn"
    output_tokens: int | None = None  # None: counted from the content
    delay_s: float = 0.0


@dataclass(frozen=True)
class ApiError:
    status: int
    error_type: str
    message: str
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0
    error_code: str | None = None  # sent as error.details.error_code, as newer API errors do

    def body(self, request_id: str) -> dict[str, Any]:
        error: dict[str, Any] = {"type": self.error_type, "message": self.message}
        if self.error_code is not None:
            error["details"] = {"error_code": self.error_code}
        return {"type": "error", "error": error, "request_id": request_id}


@dataclass(frozen=True)
class Drop:
    delay_s: float = 0.0


Reply = Message | ApiError | Drop


def new_tool_id() -> str:
    return f"toolu_loop{next(_ids):012d}"


def text(content: str, *, stop_reason: str = "end_turn") -> Message:
    """A plain text answer."""
    return Message(({"type": "text", "text": content},), stop_reason)


def tool_use(
    name: str, tool_input: Mapping[str, Any], *, preamble: str = "", tool_id: str | None = None
) -> Message:
    """One tool call (``stop_reason`` ``tool_use``), optionally after some text."""
    return tool_uses([(name, tool_input)], preamble=preamble, ids=[tool_id] if tool_id else None)


def tool_uses(
    calls: Sequence[tuple[str, Mapping[str, Any]]],
    *,
    preamble: str = "",
    ids: list[str] | None = None,
) -> Message:
    """Several tool calls in one assistant message."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": preamble}] if preamble else []
    for k, (name, tool_input) in enumerate(calls):
        use_id = ids[k] if ids else new_tool_id()
        blocks.append({"type": "tool_use", "id": use_id, "name": name, "input": dict(tool_input)})
    return Message(tuple(blocks), "tool_use")


def api_error(
    status: int,
    message: str | None = None,
    *,
    error_type: str | None = None,
    headers: Mapping[str, str] | None = None,
    error_code: str | None = None,
) -> ApiError:
    """An error answer shaped like the API's, with the type the API uses for ``status``."""
    kind = (
        error_type
        or STATUS_TYPES.get(status)
        or ("api_error" if status >= 500 else "invalid_request_error")
    )
    said = message or f"loopback: simulated {kind}"
    return ApiError(status, kind, said, tuple((headers or {}).items()), error_code=error_code)


def overloaded() -> ApiError:
    return api_error(529, "Overloaded")


def rate_limited(retry_after: float | None = None) -> ApiError:
    headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else {}
    return api_error(
        429, "This request would exceed the rate limit for your organization.", headers=headers
    )


def server_error(status: int = 500) -> ApiError:
    return api_error(status, "Internal server error")


def prompt_too_long(actual: int, limit: int) -> ApiError:
    """The API's own answer to a prompt over the context window."""
    return api_error(400, f"prompt is too long: {actual} tokens > {limit} maximum")


def credit_too_low() -> ApiError:
    return api_error(
        400,
        "Your credit balance is too low to access the Anthropic API. "
        "Please go to Plans & Billing to upgrade or purchase credits.",
    )


# ---------------------------------------------------------------------------------------------
# Rules


@dataclass(frozen=True)
class When:
    """Conditions a request must meet for a :class:`Rule` to answer it (all that are set)."""

    tool: str | None = None
    match: str | None = None
    system_match: str | None = None
    model: str | None = None
    turn: str | None = None  # "first" | "after_tool"

    def __post_init__(self) -> None:
        if self.turn not in (None, "first", "after_tool"):
            raise ValueError(f"turn must be 'first' or 'after_tool', got {self.turn!r}")
        for pattern in (self.match, self.system_match):
            if pattern is not None:
                re.compile(pattern)

    def captures(self, body: Mapping[str, Any]) -> dict[str, str] | None:
        """The named groups of ``match`` if the request meets every condition, else ``None``."""
        if self.model is not None and body.get("model") != self.model:
            return None
        if self.tool is not None and self.tool not in _tool_names(body):
            return None
        last = last_user_message(body)
        if self.turn is not None and (self.turn == "after_tool") != _has_tool_result(last):
            return None
        if self.system_match and not re.search(self.system_match, system_text(body)):
            return None
        if self.match is None:
            return {}
        found = re.search(self.match, message_text(last))
        return {k: v for k, v in found.groupdict().items() if v is not None} if found else None


@dataclass
class Rule:
    """Answers every request its ``when`` matches with ``reply`` (placeholders filled)."""

    when: When
    reply: Reply
    times: int | None = None
    used: int = field(default=0)

    def answer(self, body: Mapping[str, Any]) -> Reply | None:
        if self.times is not None and self.used >= self.times:
            return None
        captured = self.when.captures(body)
        if captured is None:
            return None
        self.used += 1
        return fill(self.reply, captured)


def fill(reply: Reply, values: Mapping[str, str]) -> Reply:
    """``reply`` with ``{name}`` placeholders in its strings replaced; fresh tool ids."""
    if not isinstance(reply, Message):
        return reply
    blocks = tuple(_fill_value(block, values) for block in reply.content)
    fresh = tuple({**b, "id": new_tool_id()} if b.get("type") == "tool_use" else b for b in blocks)
    return replace(reply, content=fresh)


def _fill_value(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        return re.sub(r"\{(\w+)\}", lambda m: values.get(m[1], m[0]), value)
    if isinstance(value, list):
        return [_fill_value(v, values) for v in value]
    if isinstance(value, dict):
        return {k: _fill_value(v, values) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------------------------------
# Request reading


def _tool_names(body: Mapping[str, Any]) -> set[str]:
    return {str(t.get("name")) for t in body.get("tools") or () if isinstance(t, dict)}


def last_user_message(body: Mapping[str, Any]) -> Mapping[str, Any]:
    for message in reversed(body.get("messages") or ()):
        if isinstance(message, dict) and message.get("role") == "user":
            return message
    return {}


def message_text(message: Mapping[str, Any]) -> str:
    """The text of a message, tool results included."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content if isinstance(content, list) else ():
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_result":
            inner = block.get("content")
            parts.append(message_text({"content": inner}) if inner else "")
    return "\n".join(parts)


def system_text(body: Mapping[str, Any]) -> str:
    system = body.get("system")
    if isinstance(system, list):
        return "\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
    return system if isinstance(system, str) else ""


def _has_tool_result(message: Mapping[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(b.get("type") == "tool_result" for b in content)


# ---------------------------------------------------------------------------------------------
# Script files


class ScriptError(ValueError):
    """A script file line that cannot be understood; the message names the line."""


@dataclass(frozen=True)
class Script:
    queue: tuple[Reply, ...]
    rules: tuple[Rule, ...]


def load_script(path: Path) -> Script:
    return parse_script(path.read_text(encoding="utf-8"), source=str(path))


def parse_script(source_text: str, *, source: str = "script") -> Script:
    """Queued replies and rules from JSON lines (format in the module docstring)."""
    queue: list[Reply] = []
    rules: list[Rule] = []
    for number, line in enumerate(source_text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            entry = json.loads(line)
            reply = reply_from_json(entry["reply"])
            if "when" in entry:
                rules.append(Rule(When(**entry["when"]), reply, entry.get("times")))
            else:
                queue.append(reply)
        except (ValueError, KeyError, TypeError, re.error) as exc:
            raise ScriptError(f"{source}:{number}: {exc}") from exc
    return Script(tuple(queue), tuple(rules))


def reply_from_json(spec: Mapping[str, Any]) -> Reply:
    """A reply from its script form (``text`` / ``tool_use`` / ``tool_uses`` / ``error`` /
    ``drop``, plus optional ``delay_s`` and ``stop_reason``)."""
    delay = float(spec.get("delay_s", 0.0))
    reply: Reply
    if spec.get("drop"):
        reply = Drop()
    elif "error" in spec:
        err = spec["error"]
        headers = {"retry-after": f"{err['retry_after']:g}"} if "retry_after" in err else {}
        reply = api_error(
            int(err["status"]),
            err.get("message"),
            error_type=err.get("type"),
            headers=headers,
            error_code=err.get("code"),
        )
    elif "tool_use" in spec or "tool_uses" in spec:
        calls = spec.get("tool_uses") or [spec["tool_use"]]
        pairs = [(str(c["name"]), dict(c.get("input", {}))) for c in calls]
        reply = tool_uses(pairs, preamble=str(spec.get("text", "")))
    elif "text" in spec:
        reply = text(str(spec["text"]), stop_reason=str(spec.get("stop_reason", "end_turn")))
    else:
        raise ValueError("a reply needs one of text, tool_use, tool_uses, error or drop")
    return replace(reply, delay_s=delay)
