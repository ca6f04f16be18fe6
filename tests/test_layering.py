"""The dependency rules the architecture relies on, checked on the source."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from memd_client.errors import MemdClientError

ROOT = Path(__file__).resolve().parents[1]


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_client_never_imports_memd_and_depends_on_msgpack_only() -> None:
    for path in (ROOT / "client" / "memd_client").rglob("*.py"):
        bad = {m for m in imported_modules(path) if m == "memd" or m.startswith("memd.")}
        assert not bad, f"{path} imports {bad}"
    project = tomllib.loads((ROOT / "client" / "pyproject.toml").read_text())["project"]
    assert [d.split(">")[0].split("=")[0] for d in project["dependencies"]] == ["msgpack"]


# Each model SDK is imported by its backend's room alone (issue 34: one room per backend).
SDK_ROOMS = {
    "anthropic": ["memd/llm/anthropic_api.py"],
    "openai": ["memd/llm/openai_api.py"],
    "google": ["memd/llm/gemini_api.py"],
}


def test_each_sdk_is_imported_by_its_backends_room_alone() -> None:
    for sdk, rooms in SDK_ROOMS.items():
        users = [
            path.relative_to(ROOT).as_posix()
            for path in (ROOT / "memd").rglob("*.py")
            if any(m == sdk or m.startswith(sdk + ".") for m in imported_modules(path))
        ]
        assert users in ([], rooms), f"{sdk} is imported by {users}"


def test_the_daemon_and_the_hook_start_without_heavy_imports() -> None:
    probe = (
        "import sys, memd.daemon.run, memd.daemon.service, memd_client.hook;"
        "print(sorted(m for m in ('anthropic', 'openai', 'google.genai', 'tiktoken', 'memd')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['memd']"  # no SDK, no tokenizer at import time
    hook_only = "import sys, memd_client.hook; print('anyio' in sys.modules, 'memd' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", hook_only], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False False"


# What READY does not need: the feature services, their IPC methods, the agent, the SDK and
# the tokenizer. They load after READY (memd.daemon.service.Daemon.build_features).
NOT_BEFORE_READY = (
    "anthropic",
    "openai",
    "google.genai",
    "tiktoken",
    "memd.compaction",
    "memd.memory",
    "memd.session.scheduler",
    "memd.session.extract",
    "memd.agent",
    "memd.dream",
    "memd.ipc.compaction_methods",
    "memd.ipc.memory_methods",
    "memd.ipc.mcp_methods",
    "memd.ipc.dream_methods",
    "memd.ipc.doctor_methods",
    "memd.llm",
    "memd.session.store",
)
# Light pure modules the opt-out check uses before READY (stdlib imports only).
ALLOWED_BEFORE_READY = ("memd.memory", "memd.memory.paths")

BEFORE_READY_PROBE = """
import sys
from pathlib import Path

from memd_client.errors import MemdClientError
from memd.config import load_config
from memd.daemon.main import build_parser
from memd.daemon.service import Daemon
from memd.ipc.handlers import method_table, method_timeouts
from memd.ipc.server import run_server
from memd.daemon.watch import run_watcher
home = Path(sys.argv[1])
env = {"HOME": str(home), "XDG_RUNTIME_DIR": str(home / "run")}
daemon = Daemon.load(load_config(env=env), env=env)
method_table(daemon), method_timeouts(daemon)
heavy = sorted(m for m in sys.modules if m.startswith(tuple(sys.argv[2:])))
print(" ".join(heavy))
"""


def test_nothing_ready_does_not_need_is_imported_before_it(tmp_path: Path) -> None:
    """Everything run before READY (config, daemon construction, method table, server,
    watcher) leaves the features, the SDK and the tokenizer unimported (R-B5)."""
    out = subprocess.run(
        [sys.executable, "-c", BEFORE_READY_PROBE, str(tmp_path), *NOT_BEFORE_READY],
        capture_output=True,
        text=True,
        check=True,
    )
    assert [m for m in out.stdout.split() if m not in ALLOWED_BEFORE_READY] == []


def test_the_deferred_method_list_matches_the_feature_tables() -> None:
    """A method added to a feature module must be listed in FEATURE_METHODS, or the daemon
    would not serve it."""
    from memd.ipc.handlers import FEATURE_METHODS, feature_methods

    class Stub:
        memory = compaction = notes = dream = None
        loaded = env_file = None

    assert sorted(feature_methods(Stub())) == sorted(FEATURE_METHODS)  # type: ignore[arg-type]


# The real daemon under a finder that records every module the event loop's thread imports
# (a module already in sys.modules is not looked up, so only real imports are seen).
LOOP_IMPORTS_PROBE = """
import atexit, sys, threading
report, argv = sys.argv[1], sys.argv[2:]
main, seen = threading.main_thread(), []
class Spy:
    def find_spec(self, name, path=None, target=None):
        if threading.current_thread() is main:
            seen.append(name)
        return None
sys.meta_path.insert(0, Spy())
atexit.register(lambda: open(report, "w").write(" ".join(seen)))
from memd.daemon.main import main as run
sys.argv = ["memd", *argv]
raise SystemExit(run())
"""


def test_the_event_loop_never_imports_a_feature_module(tmp_path: Path) -> None:
    """The features load in a worker thread after READY; an import on the loop's thread stops
    it serving meanwhile (the notes scheduler's, right after READY, kept the first ``hello``
    waiting ~140 ms). Through start-up, ingest, the feature load, the model client and the
    inline and feature methods, the loop's thread imports none of them."""
    from tests.conftest import CORPUS
    from tests.daemon_harness import call, fake_home, read_log, stop_memd, wait_for

    report = tmp_path / "loop-imports.txt"
    with fake_home(tmp_path) as home:
        project = home.projects / "-home-u-proj"
        project.mkdir(parents=True)
        source = sorted(CORPUS.glob("claude-code-viewer/*.jsonl"))[0]
        (project / source.name).write_bytes(source.read_bytes())
        log = (home.root / "memd.log").open("ab")
        proc = subprocess.Popen(
            [sys.executable, "-c", LOOP_IMPORTS_PROBE, str(report), "-v"],
            env=home.env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        try:

            def settled() -> bool:
                try:
                    status = call(home, "status")
                except MemdClientError:
                    return False
                ingest = status["ingest"]
                return (
                    bool(status["llm"].get("reason"))
                    and ingest["parsed"] >= 1
                    and not (ingest["queued"] or ingest["running"])
                )

            wait_for(settled, timeout=60, what="ingest, the features and the model client")
            session = source.stem
            for method, params in [
                ("hello", {}),
                ("sessions", {}),
                ("session", {"session": session}),
                ("should_compact", {"session": session}),
                ("recall", {"query": "tests", "cwd": "/home/u/proj"}),
                ("memories", {"cwd": "/home/u/proj"}),
            ]:
                call(home, method, params)
        finally:
            assert stop_memd(proc) == 0, read_log(home)
    imported = report.read_text().split()
    assert "memd.daemon.service" in imported  # the probe saw the loop's thread at work
    heavy = [m for m in imported if m.startswith(NOT_BEFORE_READY)]
    assert " ".join(m for m in heavy if m not in ALLOWED_BEFORE_READY) == ""


def module_graph() -> dict[str, set[str]]:
    """Each module under memd/ → the memd modules it imports: at the top, in functions and
    for the type checker alike (an import under ``TYPE_CHECKING`` still ties the two)."""
    paths = {}
    for path in (ROOT / "memd").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def module_of(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets.update(module_of(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets.update(module_of(f"{node.module}.{a.name}") for a in node.names)
        # A package's __init__ runs before its modules: importing it is no edge back.
        graph[name] = {t for t in targets if t and t != name and not name.startswith(t + ".")}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, edges = work[-1]
            step = next((t for t in edges if t not in index or t in stack), None)
            if step is not None and step not in index:
                index[step] = low[step] = len(index)
                stack.append(step)
                work.append((step, iter(sorted(graph[step]))))
            elif step is not None:
                low[node] = min(low[node], index[step])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = stack[stack.index(node) :]
                    del stack[stack.index(node) :]
                    if len(group) > 1:
                        cycles.append(sorted(group))
    return sorted(cycles)


# What sits below the composition root's package (memd/daemon/) never imports it, even for the
# type checker: the services take what they use at construction and the IPC methods a
# protocol of their own (issue 35: the dream and the memory service took the daemon's queue,
# ``status`` its health and GC figures, ipc/face.py named the registry, the opt-outs, the
# watcher's roots and the reload's outcome).
def test_nothing_below_the_daemon_imports_it() -> None:
    upward = {
        module: sorted(t for t in targets if t == "memd.daemon" or t.startswith("memd.daemon."))
        for module, targets in module_graph().items()
        if not (module == "memd.daemon" or module.startswith("memd.daemon."))
    }
    assert {m: t for m, t in upward.items() if t} == {}


def test_no_ipc_module_imports_the_daemon() -> None:
    """The composition root (memd.daemon.service) imports the IPC methods and hands itself in
    as the protocols of memd/ipc/face.py; an IPC module that imported it back would close
    the circle again."""
    users = [
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "memd" / "ipc").rglob("*.py")
        if any(m.startswith("memd.daemon.service") for m in imported_modules(path))
    ]
    assert users == []


def test_memd_has_no_import_cycle() -> None:
    """Imports point downwards only: no module imports one that imports it back, however far
    round (the daemon and its nine IPC modules were one such circle)."""
    assert import_cycles(module_graph()) == []


def test_the_cycle_check_sees_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


# What the root may still set on a part it built: what a reload changes (Daemon._apply) and the
# registry's dirty flag once its state is saved (Daemon.save_state).
ROOT_SETS_AFTER = {"_apply", "save_state"}
# The modules that build services from their parts, and where each may set a part's attribute.
BUILDERS = {
    "memd/daemon/service.py": ROOT_SETS_AFTER,
    "memd/memory/service.py": set(),
    "memd/daemon/run.py": set(),
}


def parts_set(source: str) -> list[str]:
    """Where ``source`` sets an attribute of something other than ``self`` (a part of it:
    ``self.part.attr = …``, or one it holds in a name: ``part.attr = …``), as
    ``"function: target"``."""
    wired = []
    for func in ast.walk(ast.parse(source)):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign | ast.AugAssign):
                targets = [node.target]
            else:
                continue
            wired += [
                f"{func.name}: {ast.unparse(t)}"
                for t in targets
                if isinstance(t, ast.Attribute) and ast.unparse(t.value) != "self"
            ]
    return wired


def test_parts_set_finds_a_part_wired_after_construction() -> None:
    source = "def build(self):\n    jobs = Jobs()\n    jobs.form_for = f\n    self.a.b = 1\n"
    assert parts_set(source) == ["build: jobs.form_for", "build: self.a.b"]
    assert parts_set("def f(self):\n    self.config = c\n    x = Y(a=1)\n") == []


@pytest.mark.parametrize("module", sorted(BUILDERS))
def test_the_root_wires_nothing_into_a_service_after_building_it(module: str) -> None:
    """Each service gets its collaborators at construction (issue 35): the composition root
    set five of compaction's and two of the guard's afterwards, the memory service three of
    its extraction jobs' and the beside waits, the run the daemon's server and its model
    work's scope, so any could be used half wired and its constructor did not say what it
    depends on."""
    wired = parts_set((ROOT / module).read_text())
    assert [w for w in wired if w.split(":")[0] not in BUILDERS[module]] == []
