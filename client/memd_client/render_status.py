"""``memdctl status`` as text: is memd healthy, what is it doing, what needs a person (R-B8).

Every section reads the status map defensively (``.get``): a newer daemon may add fields and
an older one may lack some; sections that other features add (``dream``) are rendered
generically so they show up before memdctl learns about them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memd_client.cli_dream import render_dream_status
from memd_client.cli_team import render_team_status
from memd_client.render import render_sessions
from memd_client.textfmt import Style, ago, duration, size, tokens


def render_status(s: dict[str, Any], style: Style | None = None) -> str:
    st = style or Style()
    d, ing = s.get("daemon", {}), s.get("ingest", {})
    lines = [
        f"memd {d.get('version')}  pid {d.get('pid')}  up {duration(d.get('uptime_s'))}  "
        f"rss {size(d.get('rss_bytes'))}",
        f"socket    {d.get('socket')}",
        f"projects  {d.get('projects_root')}",
        f"state     {d.get('state_dir')}",
        *log_lines(d),
        *env_lines(d, st),
        *model_lines(s.get("llm", {}), st),
        *recall_lines(s.get("memory", {}).get("recall_stages"), st),
        *used_lines(s.get("memory", {}).get("usage")),
        *archive_lines(s.get("memory", {}).get("archive"), st),
        f"sessions  {ing.get('sessions', 0)} known, {ing.get('parsed', 0)} parsed, "
        f"{ing.get('in_memory', 0)} in memory; {ing.get('queued', 0)} queued for reading",
        f"ingest    {size(ing.get('bytes_parsed', 0))} in {ing.get('lines', 0)} lines, "
        f"{ing.get('bad_lines', 0)} bad lines skipped"
        + (f", {ing['unreadable']} unreadable files" if ing.get("unreadable") else "")
        + _unknown_types(ing.get("unknown_types")),
        *watcher_lines(ing.get("watcher"), st),
        *source_lines(ing.get("sources"), st),
        *ipc_lines(s.get("ipc"), st),
        *write_lines(s.get("writes"), st),
        *error_lines(s, st),
        *refused_lines(s.get("refused"), st),
        *foreign_lines(s.get("foreign_files"), st),
        *git_skipped_lines(s.get("memory"), st),
        *reload_lines(d, st),
        *spend_lines(s.get("usage"), s.get("guard"), st),
        *pipeline_lines(s.get("pipeline"), st),
        *render_dream_status(s.get("dream")),
        *render_team_status(s.get("team")),
    ]
    if s.get("sessions"):
        lines += ["", render_sessions(s["sessions"])]
    return "\n".join(lines)


def log_lines(d: dict[str, Any]) -> list[str]:
    log = d.get("log")
    if not isinstance(log, dict):
        return []
    match log.get("kind"):
        case "journald":
            return [f"log       the journal: journalctl --user -u {log.get('unit', 'memd')}"]
        case "file":
            return [f"log       {log.get('path')}"]
        case _:
            return [f"log       {log.get('path') or 'stderr of the process that started memd'}"]


def env_lines(d: dict[str, Any], st: Style) -> list[str]:
    env = d.get("env_file")
    if not isinstance(env, dict):
        return []
    if env.get("problem"):
        return [f"env file  {st.bad(str(env['problem']))}"]
    if env.get("loaded"):
        keys = env.get("keys") or []
        return [f"env file  {env.get('path')} ({len(keys)} settings: {', '.join(keys)})"]
    return [f"env file  {env.get('path')} (none)"]


def model_lines(llm: dict[str, Any], st: Style) -> list[str]:
    where = f" at {llm['base_url']}" if llm.get("base_url") else ""
    if llm.get("unreachable_since"):
        text = st.bad(f"unreachable since {ago(llm['unreachable_since'])}{where}")
        if llm.get("last_error"):
            text += f": {llm['last_error']}"
        lines = [f"model     {text}"]
    elif llm.get("enabled"):
        lines = [f"model     {st.ok('enabled')} ({llm.get('provider')}{where})"]
    else:
        lines = [f"model     {st.warn(str(llm.get('reason')))}"]
    return lines + job_lines(llm)


def job_lines(llm: dict[str, Any]) -> list[str]:
    """Which backend serves each job and why; what was found and not used (issue 34)."""
    lines = []
    for kind, job in (llm.get("jobs") or {}).items():
        if job.get("backend"):
            lines.append(
                f"  {kind:<15} {job['backend']} {job.get('model')} "
                f"({job.get('protocol')}; {job.get('why')})"
            )
        elif llm.get("enabled"):
            lines.append(f"  {kind:<15} off: {job.get('reason')}")
    for name, detail in (llm.get("found_unused") or {}).items():
        lines.append(f"  found, not used: {name} ({detail})")
    return lines + cli_lines(llm)


def cli_lines(llm: dict[str, Any]) -> list[str]:
    """Each agent CLI memd can think with (issue 34): on or off, installed, logged in (its
    auth files, seen without a call), and the line that turns it on."""
    lines = []
    for name, cli in (llm.get("clis") or {}).items():
        if not isinstance(cli, dict):
            continue
        where = cli.get("command") or "not installed"
        login = f"logged in ({cli['login']})" if cli.get("login") else "not logged in"
        state = "on" if cli.get("on") else f"off; turn on: {cli.get('turn_on')}"
        lines.append(f"  agent CLI {name}: {where}, {login}; {state}")
    return lines


def recall_lines(stages: dict[str, Any] | None, st: Style) -> list[str]:
    """Which recall stages are on: the lexical ranker, the model selector, a semantic stage."""
    if not isinstance(stages, dict):
        return []
    lexical, model = stages.get("lexical") or {}, stages.get("model") or {}
    parts = [
        f"lexical over every memory ({lexical.get('indexed_memories', 0)} indexed in "
        f"{lexical.get('indexed_dirs', 0)} projects{related_part(lexical, st)})"
    ]
    if model.get("on"):
        parts.append(f"model {model.get('model')} over the ranker's best {model.get('manifest')}")
    else:
        parts.append(st.warn(f"model off ({model.get('off_reason')})"))
    parts.append(semantic_part(stages.get("semantic") or {}, st))
    return [f"recall    {'; '.join(parts)}"]


def used_lines(usage: object) -> list[str]:
    """How many of the memories injected into agents' sessions they then used, in the last
    day and week (issue 36; each use read in the agent's own transcript)."""
    if not isinstance(usage, dict):
        return []
    parts: list[str] = []
    for span in ("day", "week"):
        row = usage.get(span)
        if not isinstance(row, dict):
            continue
        share = row.get("share")
        shown = f" ({share:.0%})" if isinstance(share, int | float) else ""
        parts.append(f"{row.get('used', 0)} of {row.get('injected', 0)} in the last {span}{shown}")
    return [f"used      injected memories the agents used: {', '.join(parts)}"] if parts else []


def archive_lines(archive: object, st: Style) -> list[str]:
    """The archive of unused memories (issue 36): how many it holds, the last sweep, and what
    a disk refused (then nothing moved)."""
    if not isinstance(archive, dict):
        return []
    days = archive.get("unused_days")
    if not days:
        return ["archive   off (memory.archive_unused_days: 0)"]
    text = f"archive   {archive.get('archived', 0)} archived (unused for {days:g} days)"
    if archive.get("last_sweep"):
        text += f", last sweep {ago(archive['last_sweep'])} moved {archive.get('last_archived', 0)}"
    lines = [text]
    if archive.get("last_error"):
        lines.append("          " + st.bad(str(archive["last_error"])))
    return lines


def related_part(lexical: dict[str, Any], st: Style) -> str:
    """The lexical ranker's related-words table: read at the first recall, how many terms it
    holds, or why it is unusable (a warning: recall still works, expanding nothing)."""
    table = lexical.get("related")
    if not isinstance(table, dict):
        return ""  # a daemon from before the table
    if not table.get("read"):
        return ", related words read at the first recall"
    if table.get("off_reason"):
        return ", " + st.warn(f"related words off ({table.get('off_reason')})")
    return f", related words for {table.get('terms', 0)} terms"


def semantic_part(semantic: dict[str, Any], st: Style) -> str:
    """The semantic stage (issue 27): its model and what it has embedded, or why it is off
    (not enabled is no warning; enabled and off is)."""
    if semantic.get("on"):
        return (
            f"semantic {semantic.get('model')} ({semantic.get('embedded_memories', 0)} "
            f"embedded in {semantic.get('embedded_dirs', 0)} projects)"
        )
    why = semantic.get("off_reason")
    if not why or why == "memory.semantic.enabled is false":
        return "semantic off"
    return st.warn(f"semantic off ({why})")


def watcher_lines(w: dict[str, Any] | None, st: Style) -> list[str]:
    """Nothing while inotify watches everything; else how memd follows the tree, and the fix;
    then what it skipped (links not followed, folders it may not read)."""
    if not isinstance(w, dict):
        return []
    lines = []
    if w.get("mode") == "polling":
        lines.append(f"watcher   {st.warn('polling the whole tree')}: {w.get('reason')}")
    elif w.get("mode") not in (None, "inotify", "starting", "native"):
        text = f"inotify; {w.get('unwatched', 0)} project folders scanned instead"
        lines.append(f"watcher   {st.warn(text)}: {w.get('reason')}")
    if lines and w.get("fix"):
        lines.append(f"          fix: {w['fix']}")
    return lines + skipped_lines(w)


def source_lines(sources: Any, st: Style) -> list[str]:
    """The agents other than Claude Code: where memd follows them, and whether it leaves
    the extraction of their memories to the agent itself."""
    if not isinstance(sources, list):
        return []
    lines = []
    for row in sources[1:]:  # the first is Claude Code's projects root, shown above
        if not isinstance(row, dict):
            continue
        mode = str(row.get("watcher"))
        where = f"{row.get('agent')}: {row.get('root')}"
        text = st.warn(f"{mode}: {row.get('reason')}") if row.get("reason") else mode
        own = row.get("own_memory")
        extract = f"; no extraction, {own}" if own else ""
        lines.append(f"source    {where} ({text}){extract}")
        if row.get("native_memory"):
            lines.append(st.warn(f"          memd's memories not served: {row['native_memory']}"))
        unread = row.get("unread")
        if isinstance(unread, dict):
            lines += [f"          {n} {why}" for why, n in unread.items()]
    return lines


def skipped_lines(w: dict[str, Any]) -> list[str]:
    count = w.get("skipped_count")
    skipped = w.get("skipped")
    if not isinstance(count, int) or not count or not isinstance(skipped, list):
        return []
    lines = [f"skipped   {count} under the projects root, not watched or read:"]
    for row in skipped:
        if isinstance(row, dict):
            lines.append(f"          {row.get('path')}: {row.get('reason')}")
    if count > len(skipped):
        lines.append(f"          ... and {count - len(skipped)} more")
    return lines


def ipc_lines(ipc: dict[str, Any] | None, st: Style) -> list[str]:
    """Connections open of the limit; those turned away (``busy``) or closed to make room."""
    if not isinstance(ipc, dict):
        return []
    line = f"clients   {ipc.get('connections_open', 0)} of {ipc.get('max_connections')} connections"
    idle = ipc.get("idle_timeout_s")
    after = f"closed after {idle:g}s idle" if isinstance(idle, int | float) else "closed idle"
    closed: list[tuple[Any, str, Callable[[str], str]]] = [
        (ipc.get("busy"), "turned away busy", st.bad),
        (ipc.get("evicted"), "closed to make room", st.warn),
        (ipc.get("idle_closed"), after, str),
        (ipc.get("stalled"), "closed taking no reply", st.warn),
        (ipc.get("accept_failures"), "accepts failed (out of descriptors?)", st.bad),
    ]
    parts = [paint(f"{n} {what}") for n, what, paint in closed if isinstance(n, int) and n]
    return [line + ("; " + ", ".join(parts) if parts else "")]


WRITE_FIXES = {
    "ENOSPC": "free space on the disk that holds it (`df -h` shows which)",
    "EDQUOT": "free space within your disk quota (`quota -s`)",
    "EROFS": "the filesystem is read-only: remount it read-write",
    "EIO": "the disk reports I/O errors: check it (`dmesg`)",
    "EMFILE": "memd has no file descriptor left: raise its limit (`ulimit -n`, or "
    "LimitNOFILE= in the systemd unit) and look for what holds them (`ls /proc/PID/fd`)",
    "ENFILE": "the system has no file descriptor left: close programs or raise fs.file-max",
}


def write_fix(error: object) -> str:
    """What a person does about a failed write, by its error name (ENOSPC, …)."""
    return WRITE_FIXES.get(str(error), "check that memd may write there (owner, mode)")


def write_lines(w: dict[str, Any] | None, st: Style) -> list[str]:
    """Nothing while every write works; else each failing path, its error and since when."""
    if not isinstance(w, dict) or not w.get("failing"):
        return []
    count = w["failing"]
    lines = [
        "writes    "
        + st.bad(f"{count} file{'s' if count != 1 else ''} cannot be written")
        + "; memd serves from memory and tries again"
    ]
    for row in w.get("paths") or []:
        if not isinstance(row, dict):
            continue
        since = row.get("since")
        retry = (
            f"next try {ago(row['next_retry'])}"
            if row.get("next_retry")
            else f"{row.get('retried_by') or 'its job'} tries again"
        )
        lines.append(
            f"          {row.get('path')}: {row.get('error')} ({row.get('message')}) since "
            f"{since} ({ago(since)}), {row.get('attempts')} attempts; {retry}"
        )
        lines.append(f"          fix: {write_fix(row.get('error'))}")
    return lines


def error_lines(s: dict[str, Any], st: Style) -> list[str]:
    count = s.get("errors_last_hour", 0)
    line = f"errors    {st.bad(str(count)) if count else '0'} in the last hour"
    if s.get("last_error"):
        line += f" (last: {s['last_error']})"
    return [line]


def git_skipped_lines(memory: object, st: Style) -> list[str]:
    """Project folders whose memories' citations were checked without git (issue 26)."""
    citations = memory.get("citations") if isinstance(memory, dict) else None
    rows = citations.get("git_skipped") if isinstance(citations, dict) else None
    lines = unrecorded_lines(citations, st)
    if not isinstance(rows, list) or not rows:
        return lines
    lines += [
        f"citations {st.warn(str(len(rows)))} project folders are not git work trees (or git "
        "refused them): memories citing their files are checked without commits or branches:"
    ]
    for row in rows[:10]:
        if isinstance(row, dict):
            lines.append(f"          {row.get('folder')}: {row.get('reason')}")
    return lines


def unrecorded_lines(citations: object, st: Style) -> list[str]:
    """Memory files an extraction or a dream wrote whose citations the disk refused."""
    rows = citations.get("unrecorded") if isinstance(citations, dict) else None
    if not isinstance(rows, list) or not rows:
        return []
    lines = [
        f"citations {st.warn(str(len(rows)))} memory files' citations could not be written "
        "(checked from their text until the next run that writes them; free the disk):"
    ]
    for row in rows[:10]:
        if isinstance(row, dict):
            lines.append(f"          {row.get('file')}: {row.get('reason')}")
    return lines


def refused_lines(r: dict[str, Any] | None, st: Style) -> list[str]:
    """Links, hard links and special files found in memory dirs and not read (each once)."""
    if not isinstance(r, dict) or not r.get("count"):
        return []
    count = r["count"]
    lines = [
        f"refused   {st.warn(str(count))} entries in memory dirs were not read or written "
        "(links, hard links, special files); remove them or make them plain files:"
    ]
    entries = r.get("entries") or []
    for e in entries:
        if isinstance(e, dict):
            lines.append(
                f"          {e.get('path')}: {e.get('kind')} (seen {ago(e.get('last_seen'))})"
            )
    if count > len(entries):
        lines.append(f"          ... and {count - len(entries)} more")
    return lines


def foreign_lines(r: dict[str, Any] | None, st: Style) -> list[str]:
    """Other tools' files memd could not use (git's pointers, agents' settings), with the fix."""
    if not isinstance(r, dict) or not r.get("count"):
        return []
    count = r["count"]
    lines = [f"files     {st.warn(str(count))} of other tools' files were not used:"]
    entries = [e for e in r.get("entries") or [] if isinstance(e, dict)]
    for e in entries:
        lines.append(f"          {e.get('path')} {e.get('problem')}; {e.get('fix')}")
    if count > len(entries):
        lines.append(f"          ... and {count - len(entries)} more")
    return lines


def reload_lines(d: dict[str, Any], st: Style) -> list[str]:
    last = d.get("last_reload")
    if not isinstance(last, dict):
        return []
    outcome = str(last.get("outcome"))
    text = f"reload    {ago(last.get('at'))}: "
    text += st.ok(outcome) if outcome == "reloaded" else st.bad(str(last.get("message") or outcome))
    lines = [text]
    for key in last.get("restart_needed") or []:
        lines.append(f"restart   {st.warn(str(key))} changed; it takes effect after a restart")
    return lines


def _left(window: dict[str, Any]) -> str:
    if not window.get("limit"):
        return f"{tokens(window.get('spent', 0))} spent, no limit"
    left = max(0, window["limit"] - window.get("spent", 0))
    return f"{tokens(left)} left of {tokens(window['limit'])}"


def spend_lines(usage: dict[str, Any] | None, guard: dict[str, Any] | None, st: Style) -> list[str]:
    """Token spend, budget left, back-off and parked jobs (R-A4, R-B1, R-B8)."""
    if not usage or not guard:
        return []
    budget = guard.get("budget", {})
    hour, day = usage.get("last_hour", {}), usage.get("last_day", {})
    lines = [
        f"tokens    last hour {tokens(hour.get('billed', 0))} billed in {hour.get('calls', 0)} "
        f"calls; today {tokens(day.get('billed', 0))}",
        f"budget    hour: {_left(budget.get('hour', {}))}; day: {_left(budget.get('day', {}))}",
    ]
    if budget.get("paused_until"):
        lines.append(
            st.warn("PAUSED")
            + f"    background work waits for budget until {ago(budget['paused_until'])}"
        )
    if guard.get("account_blocked"):
        lines.append(st.bad("BLOCKED") + f"   {guard['account_blocked']}")
    for kind, k in (guard.get("kinds") or {}).items():
        if k.get("consecutive_failures"):
            lines.append(
                f"backoff   {kind}: {k['consecutive_failures']} failures in a row, next try "
                f"{ago(k.get('next_retry_at'))}; last error: {k.get('last_error')}"
            )
        for p in k.get("parked") or []:
            reason = p.get("reason") or p.get("error") if isinstance(p, dict) else p
            subject = p.get("subject", "?") if isinstance(p, dict) else "?"
            lines.append(f"parked    {kind} {subject}: {reason}")
    return lines


def pipeline_lines(p: dict[str, Any] | None, st: Style) -> list[str]:
    if not p:
        return []
    line = (
        f"work      {p.get('state')}: {p.get('pending', 0)} pending, last done "
        f"{ago(p.get('last_progress_at'))}"
    )
    if p.get("state") == "stalled":
        line += st.bad("  <- STALLED: work is queued and nothing finished for a long time")
    return [line]


def _unknown_types(unknown: Any) -> str:
    """``, N lines of unknown types (newest: a, b)``: a transcript format memd does not read
    yet shows here rather than as a wrong figure."""
    if not isinstance(unknown, dict) or not unknown.get("lines"):
        return ""
    names = ", ".join(str(n) for n in unknown.get("recent") or ())
    return f", {unknown['lines']} lines of unknown types (newest: {names})"
