"""The files a citation check reads stay inside the work tree (issue 26), even while another
process flips a folder of it to a link out and back (as issue 22's tools are tested in
``tests/test_tool_flipper.py``, whose flipper this runs)."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from memd.confined import findings
from memd.memory.citations import infer
from memd.memory.verify import Verifier
from tests.citation_support import Repo
from tests.test_tool_flipper import CALLS, flipping
from tests.uid_support import NOBODY

CANARY_SYMBOL = "outside_canary_4b7e"
TEXT = f"`inside_marker()` and `{CANARY_SYMBOL}()` are in sub/inner.py"


def test_a_folder_flipping_to_a_link_out_never_lets_a_check_read_outside(
    tmp_path: Path,
) -> None:
    repo = Repo(tmp_path / "proj")
    repo.write("sub/inner.py", "def inside_marker():\n    pass\n")
    repo.commit()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "inner.py").write_text(f"def inside_marker():\n    pass\ndef {CANARY_SYMBOL}():\n")
    spare = tmp_path / "spare"
    spare.symlink_to(outside)
    verifier = Verifier()
    where = verifier.repository(repo.root)
    cited = infer(TEXT)
    seen: Counter[str] = Counter()
    with flipping(repo.root / "sub", spare):
        for _ in range(CALLS * 4):
            found = verifier.baseline(where, cited)
            symbols = {s for c in found for s in c.symbols}
            seen["leaked"] += CANARY_SYMBOL in symbols
            seen["inside"] += symbols == {"inside_marker"}
            seen["refused"] += not found
    assert seen["leaked"] == 0, seen
    assert seen["inside"] > 0 and seen["refused"] > 0, seen  # the race was met both ways


def test_a_link_in_a_repository_is_gone_for_a_check_and_no_finding(tmp_path: Path) -> None:
    """A repository's links are its own business: a cited one reads as gone, and ``status``
    is not told of it as it is of a link planted in a memory dir."""
    repo = Repo(tmp_path / "proj")
    repo.write("real.py", "def token():\n    pass\n")
    (repo.root / "docs").symlink_to(repo.root)
    repo.commit()
    before = {f.path for f in findings.items()}
    verifier = Verifier()
    assert verifier.baseline(verifier.repository(repo.root), infer("docs/real.py:1-2")) == ()
    assert {f.path for f in findings.items()} == before


def test_another_users_file_in_the_work_tree_is_checked(tmp_path: Path) -> None:
    """A repository's files may be anyone's (a build in a container wrote them as another
    user): the check reads them, not only the user's own."""
    repo = Repo(tmp_path / "proj")
    repo.write("src/gen.py", "def generated():\n    pass\n")
    repo.commit()
    os.chown(repo.root / "src" / "gen.py", NOBODY, NOBODY)
    os.chown(repo.root / "src", NOBODY, NOBODY)
    verifier = Verifier()
    found = verifier.baseline(
        verifier.repository(repo.root), infer("`generated()` in src/gen.py:1-2")
    )
    assert [c.symbols for c in found] == [("generated",)]
