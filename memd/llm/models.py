"""Per job, the right backend (issue 34): which backend and model serve each job kind, by
which protocol, and why; what was found and not used; how to turn each on.

:func:`discover` (blocking, cheap) sees what the user has: API keys in the environment (and
the env file), a local model server answering on a default port. :func:`plan` (pure) turns
that and ``llm.models`` into one :class:`Choice` per job, or the reason there is none.
:func:`open_models` opens each backend some job uses (its room and SDK imported then, in the
daemon's worker thread) and returns :class:`Models`, which the features ask for their job's
:class:`Route` at every run: a reload swaps the whole object.

Protocol per job: ``tools`` (the multi-turn tool loop) or ``whole`` (one answer that memd
checks and applies: notes as the whole new text, memories as a list of operations). The
model's entry in its backend's ``tools_models`` / ``whole_models`` decides, else the
backend's ``protocol`` (``auto``: ``whole`` for a local server, ``tools`` otherwise); a
backend that cannot drive tools is always ``whole``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from memd.config_llm import LLMConfig
from memd.llm.backends import AUTO_ORDER, BACKENDS, Protocol, is_loopback, open_backend
from memd.llm.backends import settings_for as settings_for
from memd.llm.cli_found import CLIFound, find_clis
from memd.llm.client import LLM, Backend, BackendFacts, Disabled, LLMReply
from memd.llm.ledger import JOB_KINDS, JobKind
from memd.llm.local_probe import LocalServer, probe_all

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Found:
    """A backend memd could use, and how it knows."""

    name: str
    detail: str  # "OPENAI_API_KEY is set", "Ollama answers at http://127.0.0.1:11434/v1"
    models: tuple[str, ...] = ()  # what a local server lists
    url: str = ""  # where a local server answered


@dataclass(frozen=True)
class Choice:
    """The plan for one job (pure)."""

    kind: JobKind
    backend: str
    model: str
    why: str


@dataclass(frozen=True)
class Route:
    """What a job calls: the backend, the model on it, and how to ask it."""

    kind: JobKind
    backend: str
    llm: LLM
    model: str
    protocol: Protocol
    why: str
    priced: bool = True  # its calls cost money (a local server's do not)


@dataclass(frozen=True)
class Plan:
    default: str | None  # the backend jobs use unless ``llm.models`` names another
    choices: dict[JobKind, Choice | str]  # str: why the job has no backend


def split_job_model(value: str) -> tuple[str | None, str]:
    """``"<backend>:<model>"`` → (backend, model); anything else is a model on the default
    backend. Only a known backend name counts (``qwen2.5-coder:7b`` is a model)."""
    head, sep, rest = value.partition(":")
    if sep and head in BACKENDS:
        return head, rest
    return None, value


def discover(
    config: LLMConfig,
    env: Mapping[str, str],
    probe: Callable[[list[str], float], list[LocalServer]] = probe_all,
) -> dict[str, Found]:
    """What the user has (blocking: the local probe waits ``llm.probe_timeout_s`` at most).
    The agents' CLIs are not in it: found, they are still off (:class:`Models`'s ``clis``)."""
    found: dict[str, Found] = {}
    for name in ("anthropic", "openai", "gemini"):
        settings = settings_for(name, config)
        if env.get(settings.api_key_env, "").strip():
            found[name] = Found(name, f"{settings.api_key_env} is set")
        elif name != "anthropic" and settings.base_url and is_loopback(settings.base_url):
            found[name] = Found(name, f"llm.base_url is {settings.base_url} (no key needed)")
    for name in ("bedrock", "vertex"):
        if config.provider == name:
            found[name] = Found(name, f"llm.provider is {name}")
    local = settings_for("local", config)
    addresses = [local.base_url] if local.base_url else []
    if not addresses and config.find_local:
        addresses = list(config.local_ports)
    servers = probe(addresses, config.probe_timeout_s) if addresses else []
    if servers:
        first = servers[0]
        listed = f" ({len(first.models)} model(s))" if first.models else " (no model listed)"
        found["local"] = Found(
            "local",
            f"{first.label} answers at {first.base_url}{listed}",
            first.models,
            first.base_url,
        )
    return found


def plan(config: LLMConfig, found: Mapping[str, Found]) -> Plan:
    """Which backend and model serve each job (pure; the order is README's)."""
    default: str | None
    if config.provider != "auto":
        default = config.provider
        default_why = f"llm.provider is {config.provider}"
    else:
        default = next((n for n in AUTO_ORDER if n in found), None)
        default_why = f"the first found ({found[default].detail})" if default else ""
    choices: dict[JobKind, Choice | str] = {}
    for kind in JOB_KINDS:
        named, model = split_job_model(getattr(config.models, kind))
        backend = named or default
        if backend is None:
            choices[kind] = nothing_found()
            continue
        serves = BACKENDS[backend].serves if backend in BACKENDS else None
        if not named and serves is not None and kind not in serves:
            choices[kind] = (
                f"{backend} serves {kind} only when llm.models.{kind} names it (it starts "
                f"a program per call, too slow for a prompt); {kind} works without a model"
            )
            continue
        why = f"llm.models.{kind} names it" if named else default_why
        choices[kind] = Choice(
            kind, backend, model or _default_model(backend, kind, config, found), why
        )
    return Plan(default, choices)


def _default_model(
    backend: str, kind: JobKind, config: LLMConfig, found: Mapping[str, Found]
) -> str:
    settings = settings_for(backend, config)
    if settings.model:
        return settings.model
    listed = found[backend].models if backend in found else ()
    return BACKENDS[backend].models[kind] or (listed[0] if listed else "")


def nothing_found() -> str:
    return (
        "no API key and no local model server: set ANTHROPIC_API_KEY (or OPENAI_API_KEY, "
        "GEMINI_API_KEY) in ~/.config/memd/env or start a local model server (ollama serve), "
        "then: memdctl reload"
    )


@dataclass
class Models:
    """Every job's route, the backends opened for them, and what was found (one per
    opening: a reload builds a new one)."""

    routes: dict[JobKind, Route | Disabled]
    backends: dict[str, Backend | LLM] = field(default_factory=dict)
    found: dict[str, Found] = field(default_factory=dict)
    default: str | None = None
    key: object = None  # what it was opened from (settings, environment, servers found)
    clis: dict[str, CLIFound] = field(default_factory=dict)  # the agents' CLIs, found or not

    @classmethod
    def single(
        cls,
        llm: LLM | Disabled,
        *,
        models: Mapping[JobKind, str] | None = None,
        protocol: Protocol = "tools",
        backend: str = "anthropic",
    ) -> Models:
        """One backend for every job (tests, tools): ``models`` per job, else Claude's."""
        if isinstance(llm, Disabled):
            return cls({kind: llm for kind in JOB_KINDS})
        names = models or BACKENDS["anthropic"].models
        routes: dict[JobKind, Route | Disabled] = {
            kind: Route(kind, backend, llm, names.get(kind, ""), protocol, "the one backend")
            for kind in JOB_KINDS
        }
        return cls(routes, {backend: llm}, default=backend)

    def route(self, kind: JobKind) -> Route | Disabled:
        return self.routes[kind]

    @property
    def enabled(self) -> bool:
        return any(isinstance(r, Route) for r in self.routes.values())

    @property
    def reason(self) -> str | None:
        """Why some job has no backend (the first such reason), or None."""
        return next((r.reason for r in self.routes.values() if isinstance(r, Disabled)), None)

    def stop(self, reason: str) -> None:
        for llm in self.backends.values():
            if isinstance(llm, Backend):
                llm.stop(reason)

    async def aclose(self) -> None:
        for llm in self.backends.values():
            if isinstance(llm, Backend):
                await llm.aclose()

    def facts(self) -> dict[str, BackendFacts]:
        return {n: b.facts() for n, b in self.backends.items() if isinstance(b, Backend)}

    def status(self) -> dict[str, Any]:
        """``status``'s ``llm.jobs``, ``llm.backends``, ``llm.found`` and ``llm.turn_on``."""
        jobs: dict[str, Any] = {}
        for kind, route in self.routes.items():
            if isinstance(route, Route):
                jobs[kind] = {
                    "backend": route.backend,
                    "model": route.model,
                    "protocol": route.protocol,
                    "why": route.why,
                }
            else:
                jobs[kind] = {"backend": None, "reason": route.reason}
        used = {r.backend for r in self.routes.values() if isinstance(r, Route)}
        backends = {
            name: {
                "where": f.where,
                "priced": f.priced,
                "tools": f.tools,
                "unreachable_since": f.unreachable_since,
                "last_error": f.last_error,
            }
            for name, f in self.facts().items()
        }
        found = {
            n: f"{f.detail}; to use it: llm.provider: {n} (or llm.models.<job>: '{n}:<model>')"
            for n, f in self.found.items()
            if n not in used
        }
        turn_on = {
            n: spec.turn_on for n, spec in BACKENDS.items() if n not in used and n not in found
        }
        clis = {
            n: {"command": c.command, "login": c.login, "on": n in used, "turn_on": c.turn_on}
            for n, c in self.clis.items()
        }
        return {
            "jobs": jobs,
            "backends": backends,
            "found_unused": found,
            "turn_on": turn_on,
            "clis": clis,
        }


def open_models(
    config: LLMConfig,
    env: Mapping[str, str],
    previous: Models | None = None,
    *,
    probe: Callable[[list[str], float], list[LocalServer]] = probe_all,
) -> Models:
    """Discover, plan and open every backend a job uses (blocking: a worker thread);
    ``previous`` itself when it was opened from the same settings and found the same (the
    agents' CLIs included: one installed or logged in since is found by a reload)."""
    clis = find_clis(config, env)
    found = discover(config, env, probe)
    key = (config, tuple(sorted(env.items())), tuple(sorted(found.items())), tuple(clis.items()))
    if previous is not None and previous.key == key:
        return previous
    planned = plan(config, found)
    opened: dict[str, Backend | Disabled] = {}
    routes: dict[JobKind, Route | Disabled] = {}
    for kind, choice in planned.choices.items():
        if isinstance(choice, str):
            routes[kind] = Disabled(choice)
            continue
        if choice.backend not in opened:
            opened[choice.backend] = _open(choice.backend, config, env, found)
        llm = opened[choice.backend]
        if isinstance(llm, Disabled):
            routes[kind] = llm
        elif not choice.model:
            routes[kind] = Disabled(
                f"no model for {kind} on {choice.backend}: the server lists none; "
                f"set llm.{choice.backend}.model or llm.models.{kind}"
            )
        else:
            protocol = _protocol(choice.backend, config, llm, choice.model)
            priced = llm.facts().priced
            routes[kind] = Route(
                kind, choice.backend, llm, choice.model, protocol, choice.why, priced
            )
    backends: dict[str, Backend | LLM] = {
        n: b for n, b in opened.items() if not isinstance(b, Disabled)
    }
    return Models(routes, backends, found, planned.default, key, clis)


def _open(
    name: str, config: LLMConfig, env: Mapping[str, str], found: Mapping[str, Found]
) -> Backend | Disabled:
    if name == "local" and "local" not in found:
        return Disabled(
            "no local model server answers at "
            + (settings_for("local", config).base_url or ", ".join(config.local_ports))
            + "; start one (ollama serve) or set llm.local.base_url, then: memdctl reload"
        )
    if name == "local" and not settings_for("local", config).base_url:
        config = _with_local_url(config, found["local"].url)
    return open_backend(name, config, env)


def _with_local_url(config: LLMConfig, url: str) -> LLMConfig:
    import dataclasses

    return dataclasses.replace(config, local=dataclasses.replace(config.local, base_url=url))


def _protocol(name: str, config: LLMConfig, llm: Backend, model: str) -> Protocol:
    facts = llm.facts()
    if not facts.tools:
        return "whole"
    settings = settings_for(name, config)
    if model in settings.tools_models:
        return "tools"
    if model in settings.whole_models:
        return "whole"
    setting = settings.protocol
    if setting != "auto":
        return setting
    return "tools" if facts.priced else "whole"


def reply_backend(reply: LLMReply, route: Route) -> str:
    """The backend a reply came from (a test double does not say)."""
    return reply.backend or route.backend


def job_route(models: Models | None, kind: JobKind) -> Route | Disabled | None:
    """The job's route; None while the model client loads."""
    return None if models is None else models.route(kind)


def as_route(
    llm: LLM | Route | Disabled | None, kind: JobKind, model: str = ""
) -> Route | Disabled | None:
    """``llm`` as the job's route: a bare client (a test's, a benchmark's) serves the job with
    ``model`` (else Claude's default for it)."""
    if llm is None or isinstance(llm, Route | Disabled):
        return llm
    name = model or BACKENDS["anthropic"].models[kind]
    return Route(kind, "anthropic", llm, name, "tools", "the one backend given")


def models_of(llm: LLM | Disabled | None) -> Models | None:
    """One client (or ``Disabled``, or None while loading) for every job (tests, benchmarks)."""
    return None if llm is None else Models.single(llm)
