"""A private bare repository per synced project: where every git call of a sync runs.

memd never runs a sync's git in the user's repository: no branch, index or work tree of
theirs changes, and nothing of that repository's config (hooks, fsmonitor, filters) is
read. Each project gets a bare repository of memd's own under the state dir; memories become
blobs, a tree and a commit there (``git fast-import`` in one process: ``--done``, so a
stream cut short by a kill commits nothing), and only the ref memd names is fetched into it
and pushed from it.

Two kinds of call (both bounded in time and output, in a session of their own, killed with
it: :func:`memd.git.run_bounded`):

* **plumbing** on the store (:meth:`Store.local`): the sandbox's pinned environment
  (:func:`memd.agent.vcs.pinned_config_environment`): no system or global config, no
  program-running setting, no protocol;
* **the network** (:meth:`Store.network`: ``ls-remote``, ``fetch``, ``push``): the user's own
  git and credentials (their global config: credential helpers, ``insteadOf``, ssh; their
  ``SSH_AUTH_SOCK`` and proxies), nothing stored by memd, never a prompt (``GIT_TERMINAL_PROMPT``
  off, askpass answering nothing), hooks off, incoming objects checked
  (``transfer.fsckObjects``), only the file, git, ssh and https transports. A remote that is
  a path on this machine runs its ``upload-pack``/``receive-pack`` with hooks off, so a
  repository someone else keeps here runs no program of theirs as the user.

:class:`Calls` counts both kinds (the benchmark's "a second sync with nothing new costs one
round trip"). Blocking: call from a worker thread.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memd.agent.process import shell_environment
from memd.agent.vcs import NO_PROGRAM, pinned_config_environment
from memd.git import MAX_OUTPUT_BYTES, git_executable, run_bounded

LOCAL_TIMEOUT_S = 60.0
FETCHED = "refs/memd/fetched"
BUILT = "refs/memd/built"
BLOB_BATCH_BYTES = MAX_OUTPUT_BYTES // 2  # what one ``cat-file --batch`` call is asked for
TRANSPORTS = "file:git:ssh:http:https"
_USER_KEYS = (
    "HOME",
    "PATH",
    "USER",
    "LOGNAME",
    "SSH_AUTH_SOCK",
    "SSH_AGENT_PID",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_SSH_VARIANT",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_NOSYSTEM",
    "XDG_CONFIG_HOME",
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
    "GIT_SSL_NO_VERIFY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "no_proxy",
    "NO_PROXY",
    "all_proxy",
    "ALL_PROXY",
)
FORWARDED_KEYS = tuple(k for k in _USER_KEYS if k not in ("PATH", "USER", "LOGNAME"))
_NETWORK_OVERRIDES = (
    ("core.hooksPath", os.devnull),
    ("core.fsmonitor", "false"),
    ("core.askPass", NO_PROGRAM),
    ("transfer.fsckObjects", "true"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("fetch.writeCommitGraph", "false"),
    ("submodule.recurse", "false"),
    # Names and modes are judged by memd.team.entries, entry by entry: git's checks of them
    # (meant for a checkout, which never happens here) would refuse the whole fetch.
    *(
        (f"fetch.fsck.{check}", "ignore")
        for check in (
            "hasDot",
            "hasDotdot",
            "hasDotgit",
            "fullPathname",
            "emptyName",
            "badFilemode",
            "zeroPaddedFilemode",
            "gitmodulesSymlink",
            "gitattributesSymlink",
            "gitignoreSymlink",
            "mailmapSymlink",
            "largePathname",
        )
    ),
)
# How a push that lost a race reads (a fast-forward check, or receive-pack's ref update
# finding another push's value).
_RACE_SIGNS = (
    "[rejected]",
    "stale info",
    "fetch first",
    "non-fast-forward",
    "failed to update ref",
    "cannot lock ref",
    "incorrect old value",
    "reference already exists",
)
_OID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


class GitError(Exception):
    """A git call of a sync failed: ``reason`` in words (git's first line of complaint)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class Calls:
    """How many git processes a store ran, by kind (plumbing, network)."""

    local: int = 0
    network: int = 0
    commands: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.local + self.network


@dataclass(frozen=True)
class Identity:
    """Who a commit is by: ``Name <email>`` as git writes it (no ``<``, ``>`` or newline
    inside either part)."""

    name: str
    email: str

    @property
    def line(self) -> str:
        return f"{_ident(self.name) or 'unknown'} <{_ident(self.email)}>"


def _ident(text: str) -> str:
    return re.sub(r"[<>\x00-\x1f\x7f]", "", text).strip()[:200]


def is_local_url(url: str) -> bool:
    """Whether git reaches ``url`` on this machine (a path, or ``file://``)."""
    if url.startswith("file://"):
        return True
    if "://" in url:
        return False
    head = url.split("/", 1)[0]
    return url.startswith(("/", ".")) or ":" not in head


def url_problem(url: str) -> str | None:
    """Why memd does not pass ``url`` to git, else ``None``."""
    if not url or len(url) > 2048:
        return "the remote's URL is empty or too long"
    if url.startswith("-"):
        return f"the remote's URL {url!r} starts with '-' (git would read it as an option)"
    if any(ord(c) < 32 or ord(c) == 127 for c in url):
        return "the remote's URL holds a control character"
    scheme = url.split("::", 1)[0] if "::" in url else ""
    if scheme and "/" not in scheme:
        return f"the remote's URL uses git's {scheme!r} helper transport, which memd does not run"
    return None


def user_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` a fetch or push uses: where the user's git config and
    credentials are (home, ssh agent, proxies, certificates), nothing else."""
    return {k: env[k] for k in _USER_KEYS if k in env}


class Store:
    """One project's private bare repository (see the module docstring)."""

    def __init__(
        self,
        git_dir: Path,
        user_env: Mapping[str, str],
        *,
        timeout_s: float,
        calls: Calls | None = None,
        lock_fd: int | None = None,
    ) -> None:
        self.git_dir = git_dir
        self.lock_fd = lock_fd  # the sync's lock, held by every git it runs
        self.user_env = dict(user_env)
        self.timeout_s = timeout_s
        self.calls = calls if calls is not None else Calls()
        self._git = git_executable()

    # -- running git ---------------------------------------------------------------------

    def _argv(self, args: Sequence[str]) -> list[str]:
        if self._git is None:
            raise GitError("git is not installed (memd looks on /usr/local/bin:/usr/bin:/bin)")
        return [self._git, "--no-pager", *args]

    def local(self, args: Sequence[str], *, stdin: bytes = b"") -> bytes:
        """stdout of plumbing ``args`` on the store; :class:`GitError` when it fails or its
        output passed git's limit."""
        code, out, err = self._plumbing(args, stdin)
        if code is None:
            raise GitError(f"git {args[0]} wrote more than {MAX_OUTPUT_BYTES} bytes; cut")
        if code != 0:
            raise GitError(_complaint(args, code, err))
        return out

    def _plumbing(self, args: Sequence[str], stdin: bytes = b"") -> tuple[int | None, bytes, bytes]:
        """Exit code (``None``: output cut at the limit), stdout and stderr of ``args``."""
        env = pinned_config_environment(shell_environment(self.git_dir))
        env.update(GIT_DIR=str(self.git_dir), GIT_NO_REPLACE_OBJECTS="1")
        return self._run(args, env, stdin, LOCAL_TIMEOUT_S, network=False)

    def network(self, args: Sequence[str]) -> tuple[int | None, bytes, bytes]:
        """Exit code, stdout and stderr of ``args`` (``ls-remote``, ``fetch``, ``push``) run
        with the user's git config and credentials on the store."""
        env = dict(self.user_env)
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.update(
            GIT_DIR=str(self.git_dir),
            LC_ALL="C",
            LANG="C",
            GIT_TERMINAL_PROMPT="0",
            GIT_ASKPASS=NO_PROGRAM,
            SSH_ASKPASS=NO_PROGRAM,
            SSH_ASKPASS_REQUIRE="never",
            GIT_ALLOW_PROTOCOL=TRANSPORTS,
            GIT_NO_REPLACE_OBJECTS="1",
            GIT_OPTIONAL_LOCKS="0",
            GIT_CONFIG_COUNT=str(len(_NETWORK_OVERRIDES)),
        )
        for index, (key, value) in enumerate(_NETWORK_OVERRIDES):
            env[f"GIT_CONFIG_KEY_{index}"] = key
            env[f"GIT_CONFIG_VALUE_{index}"] = value
        return self._run(args, env, b"", self.timeout_s, network=True)

    def _run(
        self,
        args: Sequence[str],
        env: dict[str, str],
        stdin: bytes,
        timeout_s: float,
        *,
        network: bool,
    ) -> tuple[int | None, bytes, bytes]:
        argv = self._argv(args)
        if network:
            self.calls.network += 1
        else:
            self.calls.local += 1
        self.calls.commands.append(args[0])
        try:
            held = () if self.lock_fd is None else (self.lock_fd,)
            done = run_bounded(argv, self.git_dir, env, stdin, timeout_s, pass_fds=held)
        except OSError as exc:
            raise GitError(f"git could not run ({exc.strerror or exc})") from None
        if done is None:
            raise GitError(f"git {args[0]} did not answer within {timeout_s:g} s")
        return done

    # -- the store -----------------------------------------------------------------------

    def ensure(self) -> None:
        """Create the bare repository when it is missing (made aside, then renamed in, so a
        kill leaves no half-made one under the store's name)."""
        if (self.git_dir / "objects").is_dir():
            return
        self.git_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temp = Path(tempfile.mkdtemp(prefix=".store-", dir=self.git_dir.parent))
        try:
            made = Store(temp, {}, timeout_s=self.timeout_s, calls=self.calls)
            made.local(["init", "--bare", "--quiet", str(temp)])
            os.rename(temp, self.git_dir)
        except OSError as exc:
            where = self.git_dir
            raise GitError(f"memd could not make its repository at {where} ({exc})") from None
        finally:
            shutil.rmtree(temp, ignore_errors=True)

    def _transport(self, url: str, program: str) -> list[str]:
        """``--upload-pack``/``--receive-pack`` for a remote on this machine: hooks off."""
        if not is_local_url(url) or self._git is None:
            return []
        wrapped = " ".join(
            [
                shlex.quote(self._git),
                f"-c core.hooksPath={os.devnull}",
                "-c core.fsmonitor=false",
                f"-c core.alternateRefsCommand={NO_PROGRAM}",
                program,
            ]
        )
        return [f"--{program}={wrapped}"]

    def remote_tip(self, url: str, ref: str) -> str | None:
        """The commit ``ref`` names on the remote (one round trip), ``None`` when absent."""
        code, out, err = self.network(["ls-remote", *self._transport(url, "upload-pack"), url, ref])
        if code != 0:
            raise GitError(_complaint(["ls-remote"], code, err))
        for line in out.decode("ascii", "replace").splitlines():
            oid, _, name = line.partition("\t")
            if name == ref and _OID.fullmatch(oid):
                return oid
        return None

    def fetch(self, url: str, ref: str) -> str | None:
        """Fetch ``ref`` from ``url`` into the store; the commit it named, ``None`` if none."""
        spec = f"+{ref}:{FETCHED}"
        args = ["fetch", "--quiet", "--no-tags", "--no-recurse-submodules", "--no-write-fetch-head"]
        code, _, err = self.network([*args, *self._transport(url, "upload-pack"), url, spec])
        if code != 0:
            words = err.decode("utf-8", "replace")
            if "couldn't find remote ref" in words:
                return None
            raise GitError(_complaint(["fetch"], code, err))
        return self.resolve(FETCHED)

    def resolve(self, name: str) -> str | None:
        """The commit ``name`` (a ref or an id) names in the store, ``None`` when none."""
        try:
            out = self.local(["rev-parse", "--verify", "--quiet", f"{name}^{{commit}}"])
        except GitError:
            return None
        oid = out.decode("ascii", "replace").strip()
        return oid if _OID.fullmatch(oid) else None

    def listing(self, commit: str, folder: str = "") -> tuple[bytes, bool]:
        """``ls-tree -r -z -l`` of ``commit`` (of its ``folder``) and whether git's output was
        cut at its limit (:func:`memd.team.entries.read_listing` skips a cut last entry)."""
        spec = f"{commit}:{folder}" if folder else commit
        args = ["ls-tree", "-r", "-z", "-l", "--full-tree", spec]
        code, out, err = self._plumbing(args)
        if code not in (0, None):
            words = err.decode("utf-8", "replace")
            if folder and ("Not a valid object name" in words or "not a tree" in words):
                return b"", False  # the folder does not exist (yet) on the branch
            raise GitError(_complaint(args, code, err))
        return out, code is None

    def read_blobs(self, wanted: Mapping[str, int]) -> dict[str, bytes]:
        """The content of each blob in ``wanted`` (object id → size, each under git's output
        limit), by ``cat-file --batch`` calls of at most :data:`BLOB_BATCH_BYTES`."""
        found: dict[str, bytes] = {}
        for batch in _batches(wanted, BLOB_BATCH_BYTES):
            asked = "".join(f"{oid}\n" for oid in batch).encode()
            out = self.local(["cat-file", "--batch"], stdin=asked)
            found.update(_parse_batch(out))
        return found

    def commit(
        self,
        parent: str | None,
        changes: Mapping[str, bytes | None],
        *,
        message: str,
        identity: Identity,
        when: int,
    ) -> str:
        """A commit on ``parent`` with ``changes`` (path → content, ``None``: removed), made
        by ``git fast-import`` in one process; its id."""
        stamp = f"{identity.line} {when} +0000\n"
        text = message.encode("utf-8", "replace")
        parts = [
            b"feature done\n",
            f"commit {BUILT}\nmark :1\n".encode(),
            b"author " + stamp.encode("utf-8", "replace"),
            b"committer " + stamp.encode("utf-8", "replace"),
            b"data %d\n" % len(text) + text + b"\n",
        ]
        if parent is not None:
            parts.append(f"from {parent}\n".encode())
        for path, data in sorted(changes.items()):
            quoted = _quoted(path)
            if data is None:
                parts.append(b"D " + quoted + b"\n")
            else:
                head = b"M 100644 inline " + quoted + b"\ndata %d\n" % len(data)
                parts.append(head + data + b"\n")
        parts.append(b"get-mark :1\ndone\n")
        out = self.local(["fast-import", "--quiet", "--force", "--done"], stdin=b"".join(parts))
        oid = out.decode("ascii", "replace").strip().splitlines()[-1:] or [""]
        if not _OID.fullmatch(oid[0]):
            raise GitError("git fast-import did not say which commit it made")
        return oid[0]

    def push(self, url: str, commit: str, ref: str, *, lease: str | None = None) -> str | None:
        """Push ``commit`` to ``ref``; ``None`` when the remote took it, else why it was
        rejected (it moved meanwhile). ``lease``: replace the ref only if it still names that
        commit (``""``: only if it does not exist); without, only a fast-forward."""
        args = ["push", "--porcelain", "--no-verify", *self._transport(url, "receive-pack")]
        if lease is not None:
            args.append(f"--force-with-lease={ref}:{lease}")
        code, out, err = self.network([*args, url, f"{commit}:{ref}"])
        if code == 0:
            return None
        words = (out + b"\n" + err).decode("utf-8", "replace")
        if any(sign in words for sign in _RACE_SIGNS):
            return "the remote moved meanwhile"
        rejected = re.search(r"\[remote rejected\] \(([^)\n]{1,200})\)", words)
        if rejected is not None:
            raise GitError(f"git push: the remote refused the push ({rejected.group(1)})")
        raise GitError(_complaint(["push"], code, err))

    def gc(self) -> None:
        """Pack the store's objects (the sync's commits and what was fetched)."""
        self.local(["gc", "--quiet", "--prune=now"])


def _complaint(args: Sequence[str], code: int | None, err: bytes) -> str:
    words = [
        line.strip()
        for line in err.decode("utf-8", "replace").splitlines()
        if line.strip() and not line.startswith("hint:")
    ]
    picked = next((w for w in words if w.lower().startswith(("fatal", "error"))), None)
    text = picked or (words[0] if words else f"exited with {code}")
    return f"git {args[0]}: {text[:300]}"


def _batches(wanted: Mapping[str, int], limit: int) -> Iterable[list[str]]:
    batch: list[str] = []
    size = 0
    for oid, length in sorted(wanted.items()):
        cost = length + 100
        if batch and size + cost > limit:
            yield batch
            batch, size = [], 0
        batch.append(oid)
        size += cost
    if batch:
        yield batch


def _parse_batch(out: bytes) -> dict[str, bytes]:
    """``cat-file --batch`` output: ``<oid> <type> <size>\\n<content>\\n`` per object."""
    found: dict[str, bytes] = {}
    at = 0
    while at < len(out):
        end = out.find(b"\n", at)
        if end < 0:
            break
        fields = out[at:end].split()
        at = end + 1
        if len(fields) != 3 or fields[1] != b"blob" or not fields[2].isdigit():
            continue  # "<oid> missing", or another kind of object
        size = int(fields[2])
        if at + size > len(out):
            break
        found[fields[0].decode("ascii")] = out[at : at + size]
        at += size + 1
    return found


def _quoted(path: str) -> bytes:
    """``path`` C-quoted as fast-import reads it (every name quoted, so none is misread)."""
    out = bytearray(b'"')
    for byte in os.fsencode(path):
        if byte in (0x22, 0x5C):
            out += b"\\" + bytes([byte])
        elif byte < 0x20 or byte == 0x7F:
            out += b"\\%03o" % byte
        else:
            out.append(byte)
    return bytes(out + b'"')
