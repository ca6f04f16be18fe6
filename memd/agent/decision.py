"""The outcome of a permission or command check: ``Allow`` or ``Deny(reason)``.

It lives in its own module because both the path policies (:mod:`memd.agent.permissions`) and
the command classifier (:mod:`memd.agent.shell`) return it, and the policies use the classifier.
A ``Deny`` reason goes back to the model verbatim, so it always says what *is* allowed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Allow:
    """The call may go ahead."""


@dataclass(frozen=True)
class Deny:
    """The call is refused; ``reason`` is shown to the model and names what it may do instead."""

    reason: str


Decision = Allow | Deny
