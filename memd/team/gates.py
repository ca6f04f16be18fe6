"""What may leave this machine, and what may come in (pure).

Going out (:func:`outgoing`), a memory is held back, never pushed in any form, when it is
larger than the limit, is not UTF-8 text, holds a ``<private>`` span or what looks like a
secret (:mod:`memd.privacy`'s rules, the ones every memory write and model request goes
through), or reads as an attempt to steer an agent (:mod:`memd.team.steering`): the others
would quarantine it anyway. Its citations are checked by the sync against the repository
(:func:`citations_problem`): a memory that cites files, none of which the repository has at
its HEAD, would point every teammate at nothing.

Coming in (:func:`incoming`), a file the remote tree lets through (:mod:`memd.team.entries`)
is refused when its bytes are not UTF-8 text, and quarantined (kept out of the memory dir, so
out of every agent's context, and named in ``status`` with the reason) when it holds what
looks like a secret or a ``<private>`` span someone else pushed, or text that tries to steer
an agent. A quarantined memory stays on the remote as it is: memd neither spreads nor deletes
what another person wrote.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from memd.memory.citations import infer
from memd.privacy import scrub_report
from memd.team.steering import steering


@dataclass(frozen=True)
class Verdict:
    """``take``: the file may be written here; ``quarantine`` and ``refuse``: it may not,
    for ``reason``."""

    kind: Literal["take", "quarantine", "refuse"]
    reason: str = ""


TAKE = Verdict("take")


def text_of(data: bytes) -> str | None:
    """``data`` as text when it is UTF-8 without NUL bytes, else ``None``."""
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def outgoing(data: bytes, *, max_bytes: int) -> str | None:
    """Why the memory ``data`` may not leave this machine, else ``None``."""
    if len(data) > max_bytes:
        return f"it is {len(data)} bytes, over team.max_file_bytes ({max_bytes})"
    text = text_of(data)
    if text is None:
        return "it is not UTF-8 text"
    private = _private_or_secret(text)
    if private is not None:
        return private
    steered = steering(text)
    return None if steered is None else f"it reads as instructions to an agent: {steered}"


def incoming(data: bytes) -> Verdict:
    """What memd does with a file the remote sent (see the module docstring)."""
    text = text_of(data)
    if text is None:
        return Verdict("refuse", "it is not UTF-8 text")
    private = _private_or_secret(text)
    if private is not None:
        return Verdict("quarantine", f"someone pushed it but {private.removeprefix('it ')}")
    steered = steering(text)
    if steered is not None:
        return Verdict("quarantine", f"it reads as instructions to an agent: {steered}")
    return TAKE


def _private_or_secret(text: str) -> str | None:
    report = scrub_report(text)
    if report.private_spans:
        return "it holds a <private> span"
    if report.secrets:
        kinds = ", ".join(sorted(report.secrets))
        return f"it holds what looks like a secret ({kinds})"
    return None


def cited_paths(data: bytes) -> tuple[str, ...]:
    """The repository paths the memory ``data`` cites (inferred from its text)."""
    text = text_of(data)
    if text is None:
        return ()
    return tuple(dict.fromkeys(c.path for c in infer(text)))


def citations_problem(cited: Sequence[str], present: Collection[str]) -> str | None:
    """Why a memory citing ``cited`` may not be shared when the repository's HEAD holds the
    paths in ``present`` (of those cited), else ``None``: it cites files and holds none."""
    if not cited or any(path in present for path in cited):
        return None
    named = ", ".join(cited[:3]) + (" …" if len(cited) > 3 else "")
    return (
        f"it cites {named}, which the repository does not have at HEAD: commit the files, "
        "or fix the memory"
    )
