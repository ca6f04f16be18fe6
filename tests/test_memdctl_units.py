"""memdctl's pure parts: the parser, text helpers, renderers, hooks/service files, env file,
logging setup. The end-to-end behaviour is in ``test_memdctl_e2e.py``."""

from __future__ import annotations

import io
import json
import logging
import os
import plistlib
import shlex
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import memd_client.hook
from memd.daemon.logsetup import LIBRARY_LOGGERS, configure_logging, log_destination
from memd.envfile import merged, parse_env_text, read_env_file
from memd_client import service
from memd_client.agents.claude_code import HOOKS as CLAUDE_HOOKS
from memd_client.agents.claude_code import MATCHERS
from memd_client.cli import build_parser
from memd_client.cli_base import Ctx
from memd_client.cli_daemon import extraction_failure, project_params
from memd_client.cli_doctor import Check, Facts, check_agent, check_writes
from memd_client.cli_top import screen_lines
from memd_client.config_backup import Original, read_backup
from memd_client.hooks_install import (
    HOOK_CODE,
    hook_command,
    install_hooks,
    uninstall_hooks,
)
from memd_client.render import render_session, render_sessions
from memd_client.render_status import render_status
from memd_client.textfmt import ago, table, unique_prefixes

GLOBAL = {"--json": [], "--socket": ["/s/memd.sock"], "--timeout": ["7"]}


@given(
    st.sampled_from(["status", "sessions", "config", "doctor", "reload"]),
    st.lists(st.tuples(st.sampled_from(sorted(GLOBAL)), st.booleans()), unique_by=lambda t: t[0]),
)
def test_common_options_work_before_or_after_the_command(
    command: str, placed: list[tuple[str, bool]]
) -> None:
    before = [a for name, first in placed if first for a in [name, *GLOBAL[name]]]
    after = [a for name, first in placed if not first for a in [name, *GLOBAL[name]]]
    args = build_parser().parse_args([*before, command, *after])
    given_names = {name for name, _ in placed}
    assert args.json is ("--json" in given_names)
    assert args.socket == ("/s/memd.sock" if "--socket" in given_names else None)
    assert args.timeout == (7.0 if "--timeout" in given_names else None)


@pytest.mark.parametrize(
    ("argv", "attr", "value"),
    [
        (["memories", "-tmp-demo"], "project", "-tmp-demo"),
        (["memories", "-tmp-demo", "--json"], "project", "-tmp-demo"),
        (["sessions", "--project", "-home-user-proj"], "project", "-home-user-proj"),
        (["--json", "sessions", "--project", "-h-x"], "project", "-h-x"),
        (["session", "-abc-def"], "session_id", "-abc-def"),
        (["recall", "-v-query", "--project", "/x"], "query", "-v-query"),
    ],
)
def test_values_with_a_leading_dash_are_values(argv: list[str], attr: str, value: str) -> None:
    assert getattr(build_parser().parse_args(argv), attr) == value


@pytest.mark.parametrize(
    "argv",
    [
        ["--timeout", "-1", "status"],
        ["status", "--timeout", "0"],
        ["status", "--timeout", "nan"],
        ["status", "--timeout", "inf"],
        ["sessions", "--limit", "-3"],
        ["compact", "x", "--context-window", "-5"],
        ["compact", "x", "--context-window", "0"],
        ["compact", "x", "--max-output", str(2**70)],
    ],
)
def test_every_numeric_option_is_validated(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """`--timeout -1` was accepted ("did not answer within -1.0s"), and so was
    `compact --context-window -5`: a usage error (exit 2) that names the range now."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    assert "out of range" in capsys.readouterr().err


def test_project_given_as_a_path_is_sent_as_its_directory(tmp_path: Path) -> None:
    assert project_params(str(tmp_path)) == {"cwd": str(tmp_path.resolve())}
    assert project_params("-tmp-demo") == {"project": "-tmp-demo"}
    assert project_params("plain-name") == {"project": "plain-name"}


@given(st.lists(st.text("0123456789abcdef-", min_size=1, max_size=40), min_size=1, max_size=30))
def test_short_ids_are_unique_prefixes(ids: list[str]) -> None:
    short = unique_prefixes(ids)
    for ident, prefix in short.items():
        assert ident.startswith(prefix)
        others = [o for o in set(ids) if o != ident]
        assert not any(o.startswith(prefix) for o in others) or prefix == ident


def test_table_aligns_columns_and_ago_is_relative() -> None:
    text = table(["A", "NUM", "Z"], [["x", "1", "end"], ["long", "100", "e"]], right=(1,))
    assert text.splitlines() == ["A     NUM  Z", "x       1  end", "long  100  e"]
    assert ago(1000.0, now=1180.0) == "3 min ago"
    assert ago("1970-01-01T00:16:40+00:00", now=1180.0) == "3 min ago"
    assert ago(None) == "-"


NOTES_BEFORE = {"extractions": 1, "last_error_at": None}


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        ({"extractions": 2, "phase": "idle"}, None),
        (
            {"extractions": 1, "last_error_at": 5.0, "last_error": "could not reach X"},
            "the extraction failed: could not reach X",
        ),
        ({"extractions": 1, "phase": "running"}, "did not finish within 60 s (it is running)"),
        ({"extractions": 1, "phase": "idle"}, None),
    ],
)
def test_extract_outcome(after: dict[str, Any], expected: str | None) -> None:
    found = extraction_failure(NOTES_BEFORE, after, 60)
    assert (found is None) if expected is None else (found is not None and expected in found)


NOTES: dict[str, Any] = {
    "phase": "idle",
    "extractions": 0,
    "last_error": "boom",
    "last_error_at": 10.0,
    "next_trigger_tokens": 10_000,
    "notes_path": "/n.md",
    "next_trigger_condition": "init",
    "context_tokens": 50_000,
}
SESSION: dict[str, Any] = {
    "session_id": "abcdef12-0000",
    "project": "-p",
    "parsed": True,
    "context_tokens": 50_000,
    "compact_threshold": 167_000,
    "context_stale": False,
    "context_from_usage": True,
    "message_count": 12,
    "last_activity": "2020-01-01T00:00:00+00:00",
    "bad_lines": 2,
    "unreadable": "permission denied",
    "notes": NOTES,
}


def test_session_text_has_notes_status_units_and_no_reprs() -> None:
    text = render_session(SESSION)
    assert "notes        failed" in text and "50.0k tok of 167.0k tok" in text
    assert "unreadable   permission denied" in text
    for repr_bit in ("False", "True", "{'", "None"):
        assert repr_bit not in text
    rows = render_sessions([SESSION, {**SESSION, "session_id": "abcdef12-1111"}])
    assert "abcdef12-0" in rows and "abcdef12-1" in rows and "2 bad lines" in rows


def test_status_renders_new_sections_generically() -> None:
    status: dict[str, Any] = {
        "daemon": {
            "version": "1",
            "last_reload": {
                "at": 1.0,
                "outcome": "failed",
                "message": "reload failed: bad key x",
                "restart_needed": [],
            },
            "log": {"kind": "journald", "unit": "memd"},
            "env_file": {"path": "/e", "loaded": False, "keys": [], "problem": "mode 0644"},
        },
        "llm": {"enabled": True, "unreachable_since": 1.0, "base_url": "http://h:9"},
        "guard": {
            "budget": {"hour": {"limit": 0, "spent": 5}, "day": {"limit": 10, "spent": 5}},
            "kinds": {"session_notes": {"parked": [{"subject": "s1", "reason": "too big"}]}},
        },
        "usage": {"last_hour": {"billed": 5, "calls": 1}, "last_day": {"billed": 5}},
        "errors_last_hour": 2,
        "sessions": [],
    }
    text = render_status(status)
    assert "unreachable since" in text and "http://h:9" in text
    assert "reload failed: bad key x" in text and "journalctl --user -u memd" in text
    assert "parked    session_notes s1: too big" in text
    assert "env file  mode 0644" in text


def test_status_shows_which_recall_stages_are_on() -> None:
    lexical: dict[str, object] = {"on": True, "indexed_dirs": 2, "indexed_memories": 2500}
    stages = {
        "lexical": lexical,
        "model": {"on": False, "model": "m", "manifest": 200, "off_reason": "no API key"},
        "semantic": {"on": False},
    }
    text = render_status({"memory": {"recall_stages": stages}})
    assert "recall    lexical over every memory (2500 indexed in 2 projects)" in text
    assert "model off (no API key)" in text and "semantic off" in text
    stages["model"] = {"on": True, "model": "claude-haiku-4-5", "manifest": 200}
    text = render_status({"memory": {"recall_stages": stages}})
    assert "model claude-haiku-4-5 over the ranker's best 200" in text
    assert "recall" not in render_status({"memory": {}})
    stages["semantic"] = {"on": False, "off_reason": "memory.semantic.enabled is false"}
    assert "semantic off\n" in render_status({"memory": {"recall_stages": stages}}) + "\n"
    stages["semantic"] = {"on": False, "off_reason": "/m/model.safetensors is missing: fetch it"}
    text = render_status({"memory": {"recall_stages": stages}})
    assert "semantic off (/m/model.safetensors is missing: fetch it)" in text
    lexical["related"] = {"read": False}
    text = render_status({"memory": {"recall_stages": stages}})
    assert "(2500 indexed in 2 projects, related words read at the first recall)" in text
    lexical["related"] = {"read": True, "terms": 11123, "off_reason": None}
    text = render_status({"memory": {"recall_stages": stages}})
    assert "(2500 indexed in 2 projects, related words for 11123 terms)" in text
    lexical["related"] = {"read": True, "terms": 0, "off_reason": "bad; reinstall"}
    text = render_status({"memory": {"recall_stages": stages}})
    assert "related words off (bad; reinstall)" in text
    stages["semantic"] = {"on": True, "model": "o/m", "embedded_memories": 7, "embedded_dirs": 2}
    text = render_status({"memory": {"recall_stages": stages}})
    assert "semantic o/m (7 embedded in 2 projects)" in text


def test_top_screen_fits_80x24_and_shows_a_bar_per_session() -> None:
    notes: dict[str, Any] = {**NOTES, "session_id": SESSION["session_id"]}
    status = {"daemon": {"version": "1"}, "sessions": [SESSION], "notes": {"sessions": [notes]}}
    lines = screen_lines(status, None, 80, 24)
    assert len(lines) <= 24 and all(len(line) < 80 for line in lines)
    row = next(line for line in lines if line.startswith("abcdef12"))
    assert "[" in row and "#" in row and "|" in row  # the bar with the notes trigger mark
    assert row.endswith("failed")
    assert screen_lines(None, "memd is not running", 80, 24)[2] == "memd is not running"


@given(st.integers(1, 40), st.integers(0, 200), st.integers(16, 60))
def test_top_says_how_many_sessions_it_hid(listed: int, more: int, height: int) -> None:
    """`top` cut rows without saying so; status lists the newest few of all it parsed."""
    rows = [{**SESSION, "session_id": f"{i:08x}-0000"} for i in range(listed)]
    status = {"daemon": {}, "sessions": rows, "ingest": {"parsed": listed + more}}
    lines = screen_lines(status, None, 80, height)
    assert len(lines) <= height
    header = next((i for i, line in enumerate(lines) if line.startswith("SESSION")), len(lines))
    notice = [line for line in lines if "more sessions not shown" in line]
    shown = len(lines) - header - 1 - len(notice) if header < len(lines) else 0
    hidden = listed + more - shown
    if hidden:
        assert notice and notice[0].startswith(f"... {hidden} more sessions")
    else:
        assert not notice


def test_hooks_keep_the_mode_and_uninstall_gives_the_file_back_byte_for_byte(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "settings.json"
    mine = {"type": "command", "command": "/usr/bin/other-hook"}
    original = json.dumps({"hooks": {"Stop": [{"hooks": [mine]}]}, "model": "x"}).encode()
    settings.write_bytes(original)
    settings.chmod(0o644)
    install_hooks(settings, "/opt/bin/memd-hook", CLAUDE_HOOKS)
    assert stat.S_IMODE(settings.stat().st_mode) == 0o644
    assert "memd-hook" in settings.read_text()
    backup = tmp_path / "settings.json.memd-backup"
    assert read_backup(backup) == Original(original)
    # a reinstall keeps the first backup
    install_hooks(settings, "/opt/bin/other/memd-hook", CLAUDE_HOOKS)
    assert read_backup(backup) == Original(original)
    done = uninstall_hooks(settings)
    assert settings.read_bytes() == original
    assert stat.S_IMODE(settings.stat().st_mode) == 0o644
    assert not backup.exists() and any("exactly" in d for d in done)
    assert uninstall_hooks(settings) == [f"no memd hooks in {settings}; nothing to remove"]


def test_uninstall_after_other_changes_removes_only_memds_and_keeps_the_backup(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "settings.json"
    original = b'{\n    "model": "x"\n}\n'
    settings.write_bytes(original)
    install_hooks(settings, "/opt/bin/memd-hook", CLAUDE_HOOKS)
    changed = json.loads(settings.read_text())
    changed["theme"] = "dark"  # the user's own change since the install
    settings.write_text(json.dumps(changed, indent=4) + "\n")
    uninstall_hooks(settings)
    assert json.loads(settings.read_text()) == {"model": "x", "theme": "dark"}  # no "hooks": {}
    assert settings.read_text().startswith('{\n    "model"')  # the file's own indent
    assert read_backup(tmp_path / "settings.json.memd-backup") == Original(original)


def test_service_files_honour_xdg_and_stay_simple(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    plan = service.plan_service(tmp_path, "/opt/memd", "linux", {"XDG_CONFIG_HOME": str(xdg)})
    assert plan.path == xdg / "systemd/user/memd.service"
    assert "EnvironmentFile" not in plan.text
    mac = service.plan_service(tmp_path, "/opt/memd", "darwin", {})
    doc = plistlib.loads(mac.text.encode())
    assert "EnvironmentVariables" not in doc
    assert doc["StandardErrorPath"] == str(tmp_path / "Library/Logs/memd/memd.log")
    assert mac.log == doc["StandardErrorPath"]


def test_install_without_a_user_bus_writes_the_unit_and_explains(tmp_path: Path) -> None:
    plan = service.plan_service(tmp_path, "/opt/memd", "linux", {})
    with pytest.raises(service.NoUserBus, match="--no-start"):
        service.install(plan, start=True, env={"XDG_RUNTIME_DIR": str(tmp_path)})
    assert plan.path.read_text() == plan.text
    assert stat.S_IMODE(plan.path.stat().st_mode) == 0o644
    assert service.uninstall(plan, env={})[-1] == f"removed {plan.path}"


def test_env_file_parsing_and_precedence(tmp_path: Path) -> None:
    values, problems = parse_env_text(
        '# c\nexport ANTHROPIC_API_KEY="k1"\nANTHROPIC_BASE_URL=http://x\nnot a line\n'
    )
    assert values == {"ANTHROPIC_API_KEY": "k1", "ANTHROPIC_BASE_URL": "http://x"}
    assert problems == ["line 4: expected NAME=VALUE"]
    path = tmp_path / "env"
    path.write_text("ANTHROPIC_API_KEY=from-file\nOTHER=1\n")
    path.chmod(0o600)
    loaded = read_env_file(path)
    assert loaded.status()["loaded"] and loaded.status()["keys"] == ["ANTHROPIC_API_KEY", "OTHER"]
    assert merged({"ANTHROPIC_API_KEY": "real"}, loaded)["ANTHROPIC_API_KEY"] == "real"
    assert "from-file" not in json.dumps(loaded.status())


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o602])
def test_env_file_open_to_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "env"
    path.write_text("ANTHROPIC_API_KEY=k\n")
    path.chmod(mode)
    loaded = read_env_file(path)
    assert loaded.values == {} and loaded.refused
    assert loaded.problem is not None and f"chmod 600 {path}" in loaded.problem


def test_env_file_of_another_user_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "env"
    path.write_text("ANTHROPIC_API_KEY=k\n")
    path.chmod(0o600)
    loaded = read_env_file(path, uid=os.getuid() + 1)
    assert loaded.refused and loaded.problem is not None and "not to you" in loaded.problem


def test_library_loggers_stay_at_warning_unless_verbose(tmp_path: Path) -> None:
    log = tmp_path / "memd.log"
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        with log.open("w") as stream:
            configure_logging(0, stream, env={})
            assert all(logging.getLogger(n).level == logging.WARNING for n in LIBRARY_LOGGERS)
            logging.getLogger("httpx").info("HTTP Request: POST http://x 200 OK")
            logging.getLogger("watchfiles.main").info("1 change detected")
            logging.getLogger("memd.x").info("a line of ours")
            stream.flush()
            assert log_destination({}, stream) == {"kind": "file", "path": str(log)}
            configure_logging(1, stream, env={})
            assert logging.getLogger("httpx").level == logging.INFO
        text = log.read_text()
        assert "a line of ours" in text
        assert "HTTP Request" not in text and "change detected" not in text
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        for name in LIBRARY_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_drawn_on_a_terminal_only() -> None:
    args = build_parser().parse_args(["status"])
    shown, piped = _Terminal(), io.StringIO()
    for stream in (shown, piped):
        with Ctx(args, out=io.StringIO(), err=stream).progress("extracting notes"):
            pass
    assert "extracting notes" in shown.getvalue() and " s" in shown.getvalue()
    assert shown.getvalue().endswith("\r")  # the line is erased for what follows
    assert piped.getvalue() == ""
    assert Ctx(args, out=_Terminal(), env={"NO_COLOR": "1"}).style().colour is False
    assert Ctx(args, out=_Terminal(), env={"TERM": "xterm"}).style().colour is True


def check_hooks(facts: Facts) -> Check:
    return check_agent(facts, "claude_code")


def test_doctor_names_a_hook_file_that_is_gone(tmp_path: Path) -> None:
    """memd-client removed from the venv the hooks name: the hook would fail, the doctor says
    which file is missing; present again, the check passes."""
    settings = tmp_path / "settings.json"
    hook_file = tmp_path / "site-packages" / "memd_client" / "hook.py"
    install_hooks(settings, hook_command(sys.executable, str(hook_file)), CLAUDE_HOOKS)
    facts = Facts({}, tmp_path, settings=settings)
    gone = check_hooks(facts)
    assert (gone.verdict, gone.fix) == ("fail", "run `memdctl install-hooks`")
    assert str(hook_file) in gone.detail
    hook_file.parent.mkdir(parents=True)
    hook_file.write_text("")
    assert check_hooks(facts).verdict == "ok"


def test_doctor_names_an_older_install_that_claude_code_waits_for(tmp_path: Path) -> None:
    """memd's hooks as installed before issue 25 (with site, Stop and SessionEnd waited for) still
    work: the doctor says what they cost and that install-hooks replaces them."""
    settings = tmp_path / "settings.json"
    new = hook_command(sys.executable, memd_client.hook.__file__)
    old = new.replace(" -I -S ", " -I ", 1)
    entry = {"type": "command", "command": old, "timeout": 10}
    events = [*MATCHERS, "Stop"]
    settings.write_text(json.dumps({"hooks": {e: [{"hooks": [entry]}] for e in events}}))
    facts = Facts({}, tmp_path, settings=settings)
    older = check_hooks(facts)
    assert (older.verdict, older.fix) == ("warn", "run `memdctl install-hooks`: it replaces it")
    assert "interpreter with site" in older.detail
    entry["command"] = new
    settings.write_text(json.dumps({"hooks": {e: [{"hooks": [entry]}] for e in events}}))
    waited = check_hooks(facts)
    assert waited.verdict == "warn" and "waits for memd's Stop and SessionEnd hook" in waited.detail
    install_hooks(settings, new, CLAUDE_HOOKS)
    assert check_hooks(facts).verdict == "ok"


# What install-hooks registered before the hook left out ``os`` and the interpreter's teardown.
OLDER_HOOK_CODE = (
    "import sys, os.path as p; sys.path.insert(0, p.dirname(p.dirname(sys.argv[1]))); "
    "from memd_client.hook import main; sys.exit(main())"
)


def test_doctor_names_the_hook_code_install_hooks_wrote_before(tmp_path: Path) -> None:
    """A hook registered with the code install-hooks wrote before (it imported ``os`` and
    tore the interpreter down: a third more of the hook's work, on every prompt) still
    runs, and the doctor says install-hooks replaces it."""
    settings = tmp_path / "settings.json"
    new = hook_command(sys.executable, memd_client.hook.__file__)
    old = new.replace(shlex.quote(HOOK_CODE), shlex.quote(OLDER_HOOK_CODE))
    assert old != new
    install_hooks(settings, old, CLAUDE_HOOKS)
    facts = Facts({}, tmp_path, settings=settings)
    older = check_hooks(facts)
    assert (older.verdict, older.fix) == ("warn", "run `memdctl install-hooks`: it replaces it")
    assert "interpreter, older code" in older.detail
    assert install_hooks(settings, new, CLAUDE_HOOKS) != [
        f"memd hooks already present in {settings}"
    ]
    assert check_hooks(facts).verdict == "ok"


def test_status_and_doctor_name_each_failed_write_its_error_and_the_fix() -> None:
    row = {
        "path": "/s/sessions.json",
        "error": "EROFS",
        "message": "Read-only file system",
        "since": "2026-01-01T00:00:00+00:00",
        "attempts": 3,
        "next_retry": "2026-01-01T00:00:04+00:00",
        "retried_by": "memd",
    }
    job = {**row, "path": "/p/summary.md", "error": "EMFILE", "next_retry": None}
    job["retried_by"] = "its job"
    status: dict[str, Any] = {"writes": {"failing": 2, "paths": [row, job, "junk"]}}
    text = render_status(status)
    assert "2 files cannot be written" in text
    assert "/s/sessions.json: EROFS (Read-only file system) since 2026-01-01" in text
    assert "remount it read-write" in text and "its job tries again" in text
    assert "raise its limit" in text  # EMFILE's fix
    assert "writes" not in render_status({"writes": {"failing": 0, "paths": []}})
    facts = Facts({}, Path("/h"), status=status)
    check = check_writes(facts)
    assert check.verdict == "fail" and "/s/sessions.json: EROFS" in check.detail
    assert check.fix is not None and "read-write" in check.fix
    assert check_writes(Facts({}, Path("/h"), status={"writes": {"failing": 0}})).verdict == "ok"
