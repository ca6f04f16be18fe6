"""A scripted weak model for the loopback server (issue 34): it answers the whole-answer
protocol's requests (:mod:`memd.session.whole`, :mod:`memd.memory.operations`) as a small
local model would, faults included, for tests and ``bench/weak_model.py``.

Every ``fault_every``-th answer is bad, in turn: cut short at the output limit, the notes'
sections renamed, the notes' content dropped, or not JSON at all (so with the default of 3,
invalid JSON comes one time in three among the memory answers). The good answers keep what
the notes held and add one line per request, and save one memory per request. A dream asked
for one answer is answered by :mod:`memd.testing.weak_dream`, its faults counted apart
(every ``fault_every``-th dream, in turn: :data:`~memd.testing.weak_dream.DREAM_FAULTS`).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from memd.testing import loopback_replies as replies
from memd.testing.loopback_replies import Reply, message_text, system_text
from memd.testing.weak_dream import DREAM_FAULTS, DREAM_SYSTEM, dream_reply

FAULTS = ("cut_short", "wrong_sections", "invalid_json", "dropped")
_CURRENT = re.compile(r"<current_notes>\n(.*?)\n</current_notes>", re.S)


@dataclass
class WeakModel:
    """``LoopbackAPI.set_handler(model)``: answers notes and memory requests, else None."""

    fault_every: int = 3
    answered: int = 0
    dreams: int = 0
    faults: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, body: dict[str, Any]) -> Reply | None:
        system = system_text(body)
        if DREAM_SYSTEM in system:
            return self._dream(requests_of(body))
        notes = "complete, updated notes file" in system
        memory = "answer with a list of operations" in system
        if not (notes or memory):
            return None
        with self._lock:
            self.answered += 1
            number = self.answered
            fault = None
            if self.fault_every and number % self.fault_every == 0:
                fault = FAULTS[(number // self.fault_every - 1) % len(FAULTS)]
                self.faults[fault] = self.faults.get(fault, 0) + 1
        text = requests_of(body)
        return self._notes(text, number, fault) if notes else self._memory(number, fault)

    def _dream(self, text: str) -> Reply:
        with self._lock:
            self.dreams += 1
            fault = None
            if self.fault_every and self.dreams % self.fault_every == 0:
                turn = self.dreams // self.fault_every - 1
                fault = DREAM_FAULTS[turn % len(DREAM_FAULTS)]
                self.faults[f"dream_{fault}"] = self.faults.get(f"dream_{fault}", 0) + 1
        return dream_reply(text, fault)

    def _notes(self, text: str, number: int, fault: str | None) -> Reply:
        found = _CURRENT.search(text)
        current = found.group(1) if found else ""
        lines = current.split("\n")
        for i, line in enumerate(lines):  # a line under Current State's description
            if line == "# Current State" and i + 1 < len(lines):
                lines.insert(i + 2, f"Step {number}: working on the parser.")
                break
        new = "\n".join(lines)
        match fault:
            case "cut_short":
                return replies.text(f"<notes>\n{new[: len(new) // 2]}", stop_reason="max_tokens")
            case "wrong_sections":
                new = new.replace("# Current State", "# Current Status")
            case "invalid_json":
                return replies.text("Sure! Here is a summary of the session without tags.")
            case "dropped":
                new = "\n".join(line for line in new.split("\n") if line.startswith(("#", "_")))
        return replies.text(f"Here are the notes.\n<notes>\n{new}\n</notes>")

    def _memory(self, number: int, fault: str | None) -> Reply:
        ops = [
            {
                "op": "remember",
                "type": "feedback",
                "name": f"Testing rule {number}",
                "description": f"How the user wants tests run ({number})",
                "content": "Use the real database in integration tests, never a mock.",
            }
        ]
        answer = json.dumps({"operations": ops})
        match fault:
            case "cut_short":
                return replies.text(answer[: len(answer) // 2], stop_reason="max_tokens")
            case "invalid_json" | "dropped":
                return replies.text(answer.replace('"op"', "op").rstrip("}"))
            case "wrong_sections":  # a path where a name belongs, and a type that is none
                bad = {**ops[0], "type": "secret", "name": "../../etc/passwd"}
                return replies.text(json.dumps({"operations": [bad]}))
        return replies.text(f"```json\n{answer}\n```")


def requests_of(body: Mapping[str, Any]) -> str:
    """What a request asked (the last user message: a real agent CLI may send a system one
    after it, as Claude Code 2.1.332 does with its environment), for a test's records."""
    users = [m for m in body["messages"] if m.get("role") == "user"]
    return message_text(users[-1] if users else body["messages"][-1])
