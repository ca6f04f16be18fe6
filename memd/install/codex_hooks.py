"""memd's hooks for Codex CLI: ``$CODEX_HOME/hooks.json`` and their trust in ``config.toml``.

What ``memdctl install-hooks --agent codex`` runs (``python -m memd.install.codex_hooks``):
the entries go into ``hooks.json`` as for Claude Code (:mod:`memd_client.hooks_install`), and
each one's trust into ``config.toml`` (``[hooks.state."<key>"] trusted_hash``, see
:mod:`memd_client.hooks_codex`), edited with tomlkit so every comment and all the layout stay.
Codex would otherwise skip them without a word. Uninstalling removes memd's entries and the
trust memd recorded for them (any state whose hash is one of memd's entries'), nothing else;
both files come back byte for byte when memd was their only change
(:mod:`memd_client.config_backup`).

Exit codes: 0 done (or nothing to do); 1 the disk refused a write (both files as they were);
2 a file cannot be edited safely (nothing written).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import tomlkit
from tomlkit.items import Table

from memd.install.config_files import toml_load, toml_table
from memd_client.agents.codex import HOOKS as CODEX_HOOKS
from memd_client.agents.codex import TAKEOVER_HOOKS as CODEX_TAKEOVER
from memd_client.atomic import write_atomic
from memd_client.config_backup import (
    give_back,
    keep_first_backup,
    same_toml,
    undone_on_refusal,
    write_refused,
)
from memd_client.config_read import (
    config_path,
    config_text,
    has_bom,
    read_config_bytes,
    with_bom,
)
from memd_client.hooks_codex import (
    codex_home,
    hooks_turned_off,
    read_config,
    trust_entries,
)
from memd_client.hooks_install import (
    AgentHooks,
    install_hooks,
    is_memd_hook,
    read_settings,
    uninstall_hooks,
)

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def install(home: Path, command: str, spec: AgentHooks = CODEX_HOOKS) -> list[str]:
    """Register ``command`` in ``home``'s hooks.json (the events of ``spec``: with the
    takeover's PreCompact, ``CODEX_TAKEOVER``) and trust it; what was done, in words.
    Each file is edited where a link names it (the trust keys name hooks.json as Codex
    does, by the path in ``home``)."""
    hooks_file, config = home / "hooks.json", home / "config.toml"
    read_config(config)  # a config.toml memd cannot edit stops the install before any write
    old = trust_entries(hooks_file, read_settings(hooks_file), is_memd_hook)
    with undone_on_refusal(config_path(hooks_file), config_path(config)):
        done = install_hooks(hooks_file, command, spec)
        new = trust_entries(hooks_file, read_settings(hooks_file), lambda c: c == command)
        done += _edit_trust(config, new, set(old.values()) - set(new.values()), f"{hooks_file}:")
    off = hooks_turned_off(read_config(config))
    if off:
        done.append(f"warning: {config} has {off}: Codex runs no hooks until you remove it")
    return done


def uninstall(home: Path) -> list[str]:
    """Remove memd's entries from ``home``'s hooks.json and the trust memd gave them."""
    hooks_file, config = home / "hooks.json", home / "config.toml"
    read_config(config)
    mine = trust_entries(hooks_file, read_settings(hooks_file), is_memd_hook)
    with undone_on_refusal(config_path(hooks_file), config_path(config)):
        done = uninstall_hooks(hooks_file) if hooks_file.exists() else []
        return done + _edit_trust(config, {}, set(mine.values()), f"{hooks_file}:")


def _edit_trust(config: Path, add: Mapping[str, str], drop: set[str], prefix: str) -> list[str]:
    """Record ``add`` (key → hash) in ``config``'s ``[hooks.state]`` and remove the states
    under ``prefix`` whose hash is in ``drop``; the file a link names is edited."""
    real = config_path(config)
    try:
        data: bytes | None = read_config_bytes(real)
    except FileNotFoundError:
        data = None
    text = config_text(real, data) if data is not None else ""
    new = edit_state(text, add, drop, prefix)
    if new is None:
        return []
    bom = data is not None and has_bom(data)
    if add:
        only_memd = edit_state(text, {}, set(add.values()) | drop, prefix) == ""
        done = keep_first_backup(real, only_memd=only_memd)
        write_atomic(real, with_bom(new, bom), mode=None if data is not None else 0o600)
        return [*done, f"trusted memd's hooks in {config} ([hooks.state])"]
    done = give_back(real, with_bom(new, bom), same_toml, empty=not new.strip())
    return [*done, f"removed the trust of memd's hooks from {config}"]


def edit_state(text: str, add: Mapping[str, str], drop: set[str], prefix: str) -> str | None:
    """``text`` with the trust states changed (see :func:`_edit_trust`); None: no change.
    Tables the removal empties go too. Raises :class:`ConfigFileError` for a text that is not
    TOML or whose ``hooks``/``hooks.state`` are not tables."""
    doc = toml_load(text)
    hooks = toml_table(doc, "hooks", create=bool(add))
    state = toml_table(hooks, "state", create=bool(add)) if hooks is not None else None
    if hooks is None or state is None:
        return None
    changed = False
    for key in list(state.keys()):
        entry = state[key]
        trusted = entry.get("trusted_hash") if isinstance(entry, Table) else None
        if key.startswith(prefix) and trusted in drop and add.get(key) != trusted:
            del state[key]
            changed = True
    for key, trusted in add.items():
        entry = state.get(key)
        if isinstance(entry, Table):
            if entry.get("trusted_hash") != trusted:
                entry["trusted_hash"] = trusted
                changed = True
        else:
            table = tomlkit.table()
            table["trusted_hash"] = trusted
            state[key] = table
            changed = True
    if not state:
        del hooks["state"]
    if not hooks:
        del doc["hooks"]
    return tomlkit.dumps(doc) if changed else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m memd.install.codex_hooks")
    p.add_argument("action", choices=("install", "uninstall"))
    p.add_argument("--command", help="the hook command to register (install)")
    p.add_argument(
        "--compact-takeover",
        action="store_true",
        help="also register it on PreCompact for /compact (install)",
    )
    args = p.parse_args(argv)
    home = codex_home(os.environ, Path.home())
    try:
        if args.action == "install":
            if not args.command:
                p.error("install needs --command")
            spec = CODEX_TAKEOVER if args.compact_takeover else CODEX_HOOKS
            done = install(home, args.command, spec)
        else:
            done = uninstall(home)
    except OSError as exc:  # the disk refused: the work failed, the usage was right
        print(write_refused(exc, home), file=sys.stderr)
        return EXIT_FAILED
    except ValueError as exc:
        print(f"{exc}", file=sys.stderr)
        return EXIT_USAGE
    print("\n".join(done))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
