"""Dreams killed with SIGKILL just before a given write, each in a process of its own.

``python -m tests.dream_kill_driver`` reads lines ``ROOT AT [PROTOCOL]`` on stdin (the
dream's protocol: ``tools``, the default, or ``whole``). For each, it forks a
child (everything imported once, before any thread starts) that runs the dream service over
the world at ROOT (made by :func:`tests.dream_steps.prepare`; its state dir ``ROOT/state``)
against a loopback Messages API of its own, counting every write in the state dir and the
memory dir (:data:`tests.dream_steps.STEPS`), and kills itself just before the ``AT``-th
(0: never). One dream in the driver first imports what a dream imports. The child writes
``ROOT/driver.out``: the run's state, then the writes it counted, one a line. The driver
answers each line with the child's exit code (-9: killed). Used by
``tests/test_dream_kill.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import traceback
from pathlib import Path

import anyio

from memd.config_llm import LLMConfig
from memd.llm.backends import Protocol, open_llm
from memd.llm.client import Disabled, close_llm
from memd.testing.loopback import LoopbackAPI
from tests.dream_steps import STEPS, handler, memory_of, prepare
from tests.dream_support import make_service

OUT = "driver.out"


async def dream(root: Path, at: int, protocol: Protocol = "tools") -> str:
    """One forced dream over ``root``, killed before write ``at``; its state when it ends."""
    memory = memory_of(root)
    with LoopbackAPI() as api:
        api.set_handler(handler(protocol=protocol))
        llm = open_llm(LLMConfig(base_url=api.url, timeout_s=30.0), {"ANTHROPIC_API_KEY": "k"})
        assert not isinstance(llm, Disabled)
        service = make_service(root, llm, protocol=protocol)
        try:
            async with anyio.create_task_group() as tg:
                await tg.start(service.run)
                STEPS.arm(
                    [root / "state", memory],
                    at=at,
                    action=lambda: os.kill(os.getpid(), signal.SIGKILL),
                    relative=True,
                )
                with anyio.fail_after(60):
                    await service.check(cwd=None, project="proj", force=True)
                    running = service.find_dir(memory).running
                    if running is not None:
                        await running.done.wait()
                STEPS.disarm()
                tg.cancel_scope.cancel()
        finally:
            await close_llm(llm)
    state: str = service.row(memory)["last_runs"][0]["state"]
    return state


def child(root: Path, at: int, protocol: Protocol) -> int:
    try:
        state = anyio.run(dream, root, at, protocol)
    except BaseException:
        traceback.print_exc()
        return 1
    (root / OUT).write_text("\n".join([state, *STEPS.labels]) + "\n")
    return 0


def warm_up() -> None:
    """One dream here first: what its first run imports is imported once, not per child."""
    with tempfile.TemporaryDirectory() as tmp:
        prepare(memory_of(Path(tmp)))
        anyio.run(dream, Path(tmp), 0)


def serve() -> None:
    warm_up()
    for line in sys.stdin:
        root, at, *rest = line.split()
        protocol: Protocol = "whole" if rest == ["whole"] else "tools"
        pid = os.fork()
        if pid == 0:
            code = 1
            with contextlib.suppress(BaseException):
                code = child(Path(root), int(at), protocol)
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), flush=True)


if __name__ == "__main__":
    serve()
