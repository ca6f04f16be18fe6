"""The one way into a folder that other programs can write: a memory dir above all.

An agent with a shell, a shared repository or a careless script can put anything in a memory
dir: ``MEMORY.md -> ~/.ssh/id_rsa``, a hard link to a token file, a folder that flips to a
symlink between a check and a use, a FIFO. memd reads those folders into prompts, hooks and
MCP replies, so every reader and writer goes through :class:`Area`, which is secure by
construction rather than by checking a path first:

- The area's root is resolved once, when it is opened (the path *up to* it may be a link the
  user made: a symlinked ``~/.claude`` is common) and held as a directory descriptor that must
  be a directory owned by the user.
- Everything beneath is opened relative to that descriptor without following any link:
  ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`` where the kernel has
  it, else a component-by-component walk with ``O_NOFOLLOW`` from the directory descriptor.
  A relative name with ``..``, ``.``, an empty part, a NUL or a leading ``/`` never reaches the
  kernel.
- What was opened is checked on its descriptor (``fstat``), never on a path before the open: a
  file is read only when it is a regular file with one link, owned by the user; a folder is
  entered only when it is a directory owned by the user. Anything else (a link, a hard-linked
  file, a FIFO, a device, a socket, someone else's file) is :class:`Refused`: skipped by
  listings, never replaced with what it points to, never written through or over, and
  recorded once in :data:`findings` for ``status`` and ``doctor``.
- Writes are atomic (a unique temp file beside the target, created ``O_EXCL | O_NOFOLLOW``,
  fsync, ``renameat``) inside the parent's descriptor, so a folder swapped for a link after the
  walk cannot redirect them.

Names are bytes on disk: relative paths here are ``str`` with surrogate escapes (what
``os.fsdecode`` gives), and go back to the kernel through ``os.fsencode``.

Blocking I/O: call it from a worker thread. An :class:`Area` holds one descriptor; use it as a
context manager and keep it no longer than one operation.
"""

from memd.confined.area import Area, ChangeGuard, ChangeKind, Entry
from memd.confined.findings import Finding, Findings, Refused, findings, shown
from memd.confined.resolve import TEMP_MARK, _openat2, kind_of, split_relative, use_openat2
from memd.confined.tree import Folder, Skipped, tree

__all__ = [
    "TEMP_MARK",
    "Area",
    "ChangeGuard",
    "ChangeKind",
    "Entry",
    "Finding",
    "Findings",
    "Folder",
    "Refused",
    "Skipped",
    "_openat2",
    "findings",
    "kind_of",
    "shown",
    "split_relative",
    "tree",
    "use_openat2",
]
