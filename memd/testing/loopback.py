"""A real Messages-API server on 127.0.0.1 for tests and benchmarks.

Point the real SDK (or a daemon subprocess) at it::

    with LoopbackAPI() as api:                 # or: async with LoopbackAPI() as api
        env = {"ANTHROPIC_BASE_URL": api.url, "ANTHROPIC_API_KEY": "test"}
        api.push(replies.tool_use("Read", {"file_path": "/tmp/x"}), replies.text("Done."))
        ...                                      # run the code under test
        assert api.totals().cache_read_input_tokens > 0

Each ``POST /v1/messages`` is answered, in this order, by: the key check (401 without an
``x-api-key``, or with a wrong one when ``api_key`` is set); :meth:`~LoopbackAPI.hold` and
:meth:`~LoopbackAPI.delay_next`; the fault queue (:meth:`~LoopbackAPI.fail_next`,
:meth:`~LoopbackAPI.drop_next`, :meth:`~LoopbackAPI.inject`); request validation with
:mod:`memd.testing.api_rules` (400 ``invalid_request_error`` naming every problem); the
context limit (the API's own "prompt is too long: N tokens > L maximum"); the handler
(:meth:`~LoopbackAPI.set_handler`); the rules (:meth:`~LoopbackAPI.add_rule`); the reply queue
(:meth:`~LoopbackAPI.push`); and finally a short default text. 200 answers carry ``usage``
from :mod:`memd.testing.loopback_billing` (tiktoken counts, prompt-cache simulation: note that
prefixes under ``min_cache_tokens``, 1,024 by default as for Sonnet, are never cached) and stop
at ``max_tokens`` like the API. ``POST /v1/messages/count_tokens`` answers
``{"input_tokens": N}``. Every request is recorded (:attr:`~LoopbackAPI.requests`,
:meth:`~LoopbackAPI.totals`).

Two profiles: ``"strict"`` (the default, for memd's own requests: no streaming, only
``user``/``assistant`` messages) and ``"real_client"`` (for the real Claude Code CLI: it
streams, answered with server-sent events, and sends hook context as ``role: "system"``
messages inside ``messages``). ``?beta=true`` and other query strings are ignored.

Out-of-process use (:mod:`memd.testing.loopback_process`: ``python -m
memd.testing.loopback_process --port 0 --script FILE``) prints the URL on its first stdout line
and serves until SIGTERM/SIGINT; ``GET /_loopback/requests`` and ``GET /_loopback/totals``
report what it saw, ``POST /_loopback/script`` appends script lines (see
:mod:`memd.testing.loopback_replies`).
"""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from types import TracebackType
from typing import Any, Literal

from memd.llm.client import Usage
from memd.testing import loopback_billing as billing
from memd.testing import loopback_replies as replies
from memd.testing import loopback_wires as wires
from memd.testing.api_rules import request_problems
from memd.testing.loopback_http import Served, Streamed, json_reply
from memd.testing.loopback_replies import ApiError, Drop, Message, Reply, Rule, When

Handler = Callable[[dict[str, Any]], Reply | None]
Profile = Literal["strict", "real_client"]


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server saw it, and what it answered (status 0: dropped)."""

    index: int
    method: str
    path: str
    headers: Mapping[str, str]  # lower-case names
    body: Any  # the decoded JSON, or None when the body was not JSON
    received_at: float  # time.time()
    status: int
    response: Any  # the JSON answered, None for a dropped connection
    usage: Usage | None  # what a 200 message answer billed


@dataclass(frozen=True)
class Totals:
    """Sums over every recorded request; only 200 message answers bill tokens."""

    requests: int = 0
    messages: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def usage(self) -> Usage:
        return Usage(
            self.input_tokens,
            self.output_tokens,
            self.cache_creation_input_tokens,
            self.cache_read_input_tokens,
        )


class LoopbackAPI(Served):
    """The server. All methods are thread-safe; scripting calls may come at any time."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        context_limit: int = 200_000,
        min_cache_tokens: int = billing.DEFAULT_MIN_CACHE_TOKENS,
        default_text: str = "OK.",
        api_key: str | None = None,
        strict_alternation: bool = False,
        profile: Profile = "strict",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.context_limit = context_limit
        self.default_text = default_text
        self.api_key = api_key  # None: any non-empty key is accepted
        self.strict_alternation = strict_alternation
        self.profile: Profile = profile
        self.models: tuple[str, ...] = ("loopback-model",)  # what GET /v1/models lists
        super().__init__((host, port))
        self._cond = threading.Condition()
        self._closing = threading.Event()
        self._cache = billing.PromptCache(min_tokens=min_cache_tokens, clock=clock)
        self._queue: collections.deque[Reply] = collections.deque()
        self._faults: collections.deque[Reply] = collections.deque()
        self._delays: collections.deque[float] = collections.deque()
        self._rules: list[Rule] = []
        self._handler: Handler | None = None
        self._records: list[RecordedRequest] = []
        self._totals = Totals()
        self._held = False
        self._waiting = 0
        self._messages_sent = 0

    # -- lifecycle (start, url, ``with``: memd.testing.loopback_http.Served) ----------------

    def close(self) -> None:
        """Stop serving; requests held or delayed are released and their connections cut."""
        self._closing.set()
        with self._cond:
            self._cond.notify_all()
        super().close()

    async def __aenter__(self) -> LoopbackAPI:
        return self.start()  # binding a socket and starting a thread do not block

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        import anyio

        await anyio.to_thread.run_sync(self.close)

    # -- scripting ---------------------------------------------------------------------------

    def push(self, *items: Reply) -> None:
        """Queue replies; each answers one request, in order, after handler and rules."""
        with self._cond:
            self._queue.extend(items)

    def reply_text(self, content: str) -> None:
        self.push(replies.text(content))

    def reply_tool_use(self, name: str, tool_input: Mapping[str, Any], preamble: str = "") -> None:
        self.push(replies.tool_use(name, tool_input, preamble=preamble))

    def add_rule(self, when: When, reply: Reply, *, times: int | None = None) -> None:
        """Answer every request ``when`` matches (see :class:`~.loopback_replies.When`)."""
        with self._cond:
            self._rules.append(Rule(when, reply, times))

    def load_script(self, script: replies.Script) -> None:
        with self._cond:
            self._queue.extend(script.queue)
            self._rules.extend(script.rules)

    def set_handler(self, handler: Handler | None) -> None:
        """``handler(body)`` answers first; returning ``None`` falls through to rules/queue.

        It runs in a server thread, under no lock.
        """
        with self._cond:
            self._handler = handler

    # -- faults ------------------------------------------------------------------------------

    def fail_next(
        self,
        n: int = 1,
        *,
        status: int = 529,
        retry_after: float | None = None,
        message: str | None = None,
        error_type: str | None = None,
    ) -> None:
        """The next ``n`` requests get an error answer (before validation, like the API's
        front door); ``retry_after`` sets the header in seconds."""
        headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else {}
        error = replies.api_error(status, message, error_type=error_type, headers=headers)
        self.inject(*([error] * n))

    def drop_next(self, n: int = 1) -> None:
        """The next ``n`` requests get their connection closed without an answer."""
        self.inject(*([Drop()] * n))

    def inject(self, *faults: Reply) -> None:
        """Replies that pre-empt everything else, one per request, in order."""
        with self._cond:
            self._faults.extend(faults)

    def delay_next(self, n: int = 1, *, seconds: float) -> None:
        """The next ``n`` requests are answered ``seconds`` late (cut short by close)."""
        with self._cond:
            self._delays.extend([seconds] * n)

    def hold(self) -> None:
        """Park every request that arrives from now on until :meth:`release`."""
        with self._cond:
            self._held = True

    def release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()

    def wait_held(self, count: int, timeout: float = 10.0) -> None:
        """Block until ``count`` requests are parked by :meth:`hold` (TimeoutError if not)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._waiting >= count, timeout):
                raise TimeoutError(f"{self._waiting} of {count} requests arrived in {timeout} s")

    # -- inspection --------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request answered so far, oldest first."""
        with self._cond:
            return list(self._records)

    def totals(self) -> Totals:
        with self._cond:
            return self._totals

    def wait_requests(self, count: int, timeout: float = 10.0) -> list[RecordedRequest]:
        """Block until ``count`` requests were answered (TimeoutError if not); the snapshot."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._records) >= count, timeout):
                raise TimeoutError(f"{len(self._records)} of {count} requests in {timeout} s")
            return list(self._records)

    def clear_cache(self) -> None:
        with self._cond:
            self._cache.clear()

    def reset(self) -> None:
        """Forget records, totals, queued replies, rules, faults and the cache."""
        with self._cond:
            self._records.clear()
            self._totals = Totals()
            for pending in (self._queue, self._faults, self._delays):
                pending.clear()
            self._rules.clear()
            self._cache.clear()

    # -- answering (called from server threads) ----------------------------------------------

    def serve(
        self, method: str, path: str, headers: Mapping[str, str], raw: bytes
    ) -> tuple[Reply, Any]:
        """:class:`~.loopback_http.Backend`: answer, delay and record one request."""
        if path.startswith("/_loopback/"):
            return self._control(method, path, raw)
        received = time.time()
        try:
            body = json.loads(raw) if method == "POST" else None
        except ValueError:
            body = None
        reply, payload = self._route(method, path, headers, body)
        if method == "GET":
            return reply, payload  # a model list: not a model call
        if reply.delay_s:
            self._closing.wait(reply.delay_s)
        match reply:
            case Message():
                message = payload.message if isinstance(payload, Streamed) else payload
                status, response, usage = 200, message, _usage(message)
            case ApiError():
                status, response, usage = reply.status, reply.body(""), None
            case Drop():
                status, response, usage = 0, None, None
        record = RecordedRequest(0, method, path, headers, body, received, status, response, usage)
        self._record(record)
        return wires.on_wire(wires.wire_of(path), path, reply, payload)

    def _route(
        self, method: str, path: str, headers: Mapping[str, str], body: Any
    ) -> tuple[Reply, Any]:
        wire = wires.wire_of(path)
        if method == "GET" and path in wires.MODEL_LISTS:
            return json_reply(wires.model_list(path, self.models))
        if method != "POST" or wire is None:
            return replies.api_error(404, f"no such endpoint: {method} {path}"), None
        if not isinstance(body, dict):
            return replies.api_error(400, "the request body must be a JSON object"), None
        if wire != "messages":
            return self._answer(*wires.as_messages(wire, path, body), headers, streams=True)
        if "anthropic-version" not in headers:
            return replies.api_error(400, "anthropic-version: header is required"), None
        return self._answer(path, body, headers)

    def _answer(
        self, path: str, body: dict[str, Any], headers: Mapping[str, str], *, streams: bool = False
    ) -> tuple[Reply, Any]:
        if (denied := self._check_key(headers)) is not None:
            return denied, None
        self._wait_gate()
        with self._cond:
            fault = self._faults.popleft() if self._faults else None
        if fault is not None:
            return fault, None
        counting = path.endswith("/count_tokens")
        checked = {"max_tokens": 1, **body} if counting else body
        real = self.profile == "real_client"
        betas = frozenset(b.strip() for b in headers.get("anthropic-beta", "").split(","))
        problems = request_problems(
            checked, strict_alternation=self.strict_alternation, system_messages=real, betas=betas
        )
        if problems:
            return replies.api_error(400, "; ".join(problems)), None
        if body.get("stream") and not (real or streams):
            return replies.api_error(400, "stream: the loopback server does not stream"), None
        prompt = billing.count_prompt(body)
        if prompt > self.context_limit:
            return replies.prompt_too_long(prompt, self.context_limit), None
        if counting:
            return json_reply({"input_tokens": prompt})
        reply = self._pick(body)
        if isinstance(reply, Message):
            message = self._message_body(body, reply)
            return reply, Streamed(message) if body.get("stream") else message
        return reply, None

    def _control(self, method: str, path: str, raw: bytes) -> tuple[Reply, Any]:
        match method, path.removeprefix("/_loopback/"):
            case "GET", "totals":
                return json_reply(asdict(self.totals()))
            case "GET", "requests":
                hidden = {"x-api-key", "authorization"}
                return json_reply(
                    [
                        {
                            **asdict(r),
                            "headers": {k: v for k, v in r.headers.items() if k not in hidden},
                        }
                        for r in self.requests
                    ]
                )
            case "POST", "reset":
                self.reset()
                return json_reply({"reset": True})
            case "POST", "script":
                try:
                    script = replies.parse_script(raw.decode("utf-8"), source="POST")
                except (replies.ScriptError, UnicodeDecodeError) as exc:
                    return replies.api_error(400, str(exc)), None
                self.load_script(script)
                return json_reply({"queued": len(script.queue), "rules": len(script.rules)})
        return replies.api_error(404, f"no such endpoint: {method} {path}"), None

    def _check_key(self, headers: Mapping[str, str]) -> ApiError | None:
        given = (
            headers.get("x-api-key")
            or headers.get("x-goog-api-key")
            or headers.get("authorization", "").removeprefix("Bearer ")
        )
        if not given:
            return replies.api_error(401, "x-api-key header is required")
        if self.api_key is not None and given != self.api_key:
            return replies.api_error(401, "invalid x-api-key")
        return None

    def _wait_gate(self) -> None:
        with self._cond:
            delay = self._delays.popleft() if self._delays else 0.0
            self._waiting += 1
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._held or self._closing.is_set())
            self._waiting -= 1
        if delay:
            self._closing.wait(delay)

    def _pick(self, body: dict[str, Any]) -> Reply:
        with self._cond:
            handler = self._handler
        if handler is not None and (chosen := handler(body)) is not None:
            return chosen
        with self._cond:
            for rule in self._rules:
                if (answer := rule.answer(body)) is not None:
                    return answer
            if self._queue:
                return self._queue.popleft()
        return replies.text(self.default_text)

    def _message_body(self, body: dict[str, Any], reply: Message) -> dict[str, Any]:
        content, stop_reason = _cut(list(reply.content), reply.stop_reason, body["max_tokens"])
        output = reply.output_tokens
        if output is None:
            output = billing.count_content(content)
        parts = billing.segments(body)
        with self._cond:
            bill = self._cache.bill(str(body["model"]), parts)
            self._messages_sent += 1
            number = self._messages_sent
        return {
            "id": f"msg_loop{number:012d}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": bill.input_tokens,
                "cache_creation_input_tokens": bill.cache_creation_input_tokens,
                "cache_read_input_tokens": bill.cache_read_input_tokens,
                "cache_creation": {  # billed under the lifetime the request asked for
                    "ephemeral_5m_input_tokens": 0,
                    "ephemeral_1h_input_tokens": 0,
                    f"ephemeral_{billing.creation_ttl(body)}_input_tokens": (
                        bill.cache_creation_input_tokens
                    ),
                },
                "output_tokens": output,
                "service_tier": "standard",
            },
        }

    def _record(self, request: RecordedRequest) -> None:
        usage = request.usage
        with self._cond:
            request = replace(request, index=len(self._records))
            self._records.append(request)
            t = self._totals
            self._totals = Totals(
                t.requests + 1,
                t.messages + (usage is not None),
                t.input_tokens + (usage.input_tokens if usage else 0),
                t.output_tokens + (usage.output_tokens if usage else 0),
                t.cache_creation_input_tokens + (usage.cache_creation_input_tokens if usage else 0),
                t.cache_read_input_tokens + (usage.cache_read_input_tokens if usage else 0),
            )
            self._cond.notify_all()


def _cut(
    content: list[dict[str, Any]], stop_reason: str, max_tokens: int
) -> tuple[list[dict[str, Any]], str]:
    """Stop a text answer at ``max_tokens`` as the API does."""
    if billing.count_content(content) <= max_tokens or any(
        b.get("type") != "text" for b in content
    ):
        return content, stop_reason
    kept: list[dict[str, Any]] = []
    budget = max_tokens
    for block in content:
        piece = billing.truncate_text(block["text"], budget)
        if piece:
            kept.append({"type": "text", "text": piece})
        budget -= billing.count_text(piece)
        if budget <= 0:
            break
    return kept, "max_tokens"


def _usage(payload: Any) -> Usage | None:
    raw = payload.get("usage") if isinstance(payload, dict) else None
    if not isinstance(raw, dict):
        return None
    return Usage(
        raw["input_tokens"],
        raw["output_tokens"],
        raw["cache_creation_input_tokens"],
        raw["cache_read_input_tokens"],
    )
