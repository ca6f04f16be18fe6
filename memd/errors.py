"""memd's exception tree.

Expected outcomes (a gate that stays closed, a denied tool call, a busy lock) are return
values, not exceptions. Exceptions are for things that stop the unit of work at hand:

    MemdError
    ├── ConfigError            the configuration is invalid; names every bad key
    ├── StartupError           the daemon cannot start (another instance, unusable dirs)
    ├── TranscriptError        a transcript cannot be read at all (bad lines are only counted)
    ├── StateError             persisted state is unreadable
    ├── NotFound               a named session, project or file does not exist
    ├── LLMError               a model call failed; raised only by memd.llm.client
    │   ├── LLMDisabled            no API key / provider not configured
    │   ├── PromptTooLong          carries the token figures when the API states them
    │   ├── RateLimited            carries retry_after seconds when the API sends one
    │   ├── Overloaded             529
    │   ├── Unavailable            5xx, connection errors, timeouts
    │   │   └── Unreachable            no connection to the API at all (names the URL)
    │   ├── AuthenticationFailed   401/403: retrying will not help
    │   ├── QuotaExceeded          billing/credit errors: retrying will not help
    │   ├── BadRequest             any other 4xx: our request was wrong
    │   └── MalformedAnswer        a whole answer memd cannot use (cut short, template broken,
    │                              not the JSON asked for): nothing was changed
    ├── CompactionFailed       a full compaction produced no summary (still too long, empty reply)
    ├── BudgetExhausted        the cost guard refuses background work until resume_at
    ├── AgentError             a sub-agent run ended without doing its job (turn limit, timeout)
    └── WriteFailed            a job's file could not be written (disk full, read-only, no
                               descriptor): the job fails and is tried again later
"""

from __future__ import annotations


class MemdError(Exception):
    """Base of every error memd raises on purpose."""


class ConfigError(MemdError):
    pass


class StartupError(MemdError):
    pass


class TranscriptError(MemdError):
    pass


class StateError(MemdError):
    pass


class NotFound(MemdError):
    pass


class LLMError(MemdError):
    """A model call failed. ``retryable`` tells the scheduler whether backing off can help."""

    retryable: bool = False


class LLMDisabled(LLMError):
    pass


class PromptTooLong(LLMError):
    """The request is over the model's context. ``sent`` is set by the background job that
    built it: its own estimate of the part it can drop, so the next attempt sends less
    (R-B1)."""

    def __init__(self, message: str, *, actual: int | None = None, limit: int | None = None):
        super().__init__(message)
        self.actual = actual
        self.limit = limit
        self.sent: int | None = None

    @property
    def gap(self) -> int | None:
        """Tokens over the limit, when the API said both figures."""
        if self.actual is None or self.limit is None:
            return None
        return max(0, self.actual - self.limit)


class RateLimited(LLMError):
    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class Overloaded(LLMError):
    retryable = True


class Unavailable(LLMError):
    retryable = True


class Unreachable(Unavailable):
    """No connection could be made (DNS, refused, TLS): ``status`` shows it since when."""


class AuthenticationFailed(LLMError):
    pass


class QuotaExceeded(LLMError):
    pass


class BadRequest(LLMError):
    pass


class MalformedAnswer(LLMError):
    """The model answered, but not with something memd can apply (issue 34: the whole-answer
    protocol of weak models): cut short, the notes' template broken, their content lost, not
    the JSON asked for, an operation outside what is allowed. Nothing was changed; the job is
    parked (tried again after its back-off, never at once) and the answer counted."""


class CompactionFailed(MemdError):
    pass


class BudgetExhausted(MemdError):
    def __init__(self, message: str, *, resume_at: float):
        super().__init__(message)
        self.resume_at = resume_at


class AgentError(MemdError):
    pass


class WriteFailed(MemdError, OSError):
    """A write done for a job failed in a way waiting can fix (``memd.writes.DISK_FAULTS``):
    the job ends failed and is tried again by its scheduling, rather than going on as if its
    file were written. An ``OSError`` too (same ``errno``): code that handles a failed write
    goes on handling it."""

    def __init__(self, path: str, error: OSError) -> None:
        super().__init__(error.errno, error.strerror or str(error), path)
        self.path = path
        self.error = error

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.strerror}"
