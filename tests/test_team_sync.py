"""Team sync with real git: homes sharing one bare remote change, remove and add memories."""

from __future__ import annotations

import threading
from pathlib import Path

from memd.team.outcome import Target
from tests.team_support import Home, bodies, git, homes, memory, remote_files


def test_a_memory_travels_and_a_second_sync_costs_one_round_trip(tmp_path: Path) -> None:
    _, (alice, bob) = homes(tmp_path, "alice", "bob")
    alice.write("deploy.md", memory("deploy", "run make deploy"))
    first = alice.sync()
    assert first.ok and first.pushed == ["deploy.md"], first.message
    got = bob.sync()
    assert got.ok and got.taken == ["deploy.md"]
    assert "run make deploy" in bob.files()["deploy.md"]
    assert 'author: "alice <alice@example.org>"' in bob.files()["deploy.md"]
    again = bob.sync()
    assert again.nothing_new and again.git_calls == 1 and again.network_calls == 1


def test_both_change_one_memory_both_versions_are_kept_and_marked(tmp_path: Path) -> None:
    _, (alice, bob) = homes(tmp_path, "alice", "bob")
    alice.write("ci.md", memory("ci", "CI runs on push"))
    alice.sync()
    bob.sync()
    alice.write("ci.md", memory("ci", "CI runs on push and nightly"))
    bob.write("ci.md", memory("ci", "CI runs on push, tests with -x"))
    assert alice.sync().ok
    second = bob.sync()
    assert second.conflicts == ["ci.md"], second.message
    alice.sync()
    for home in (alice, bob):
        files = home.files()
        assert len(files) == 2
        assert {"CI runs on push and nightly", "CI runs on push, tests with -x"} == bodies(files)
        copy = next(t for p, t in files.items() if p != "ci.md")
        assert 'reconcile_with: "team/ci.md"' in copy
    assert alice.files() == bob.files()


def test_a_removal_against_an_edit_keeps_the_edit(tmp_path: Path) -> None:
    _, (alice, bob) = homes(tmp_path, "alice", "bob")
    alice.write("a.md", memory("a", "first"))
    alice.write("b.md", memory("b", "second"))
    alice.sync()
    bob.sync()
    alice.remove("a.md")  # alice removes a, bob edits it
    bob.write("a.md", memory("a", "first, edited"))
    bob.remove("b.md")  # bob removes b, alice edits it
    alice.write("b.md", memory("b", "second, edited"))
    alice.sync()
    bob.sync()
    alice.sync()
    for home in (alice, bob):
        assert bodies(home.files()) == {"first, edited", "second, edited"}


def test_removals_and_additions_travel(tmp_path: Path) -> None:
    url, (alice, bob, carol) = homes(tmp_path, "alice", "bob", "carol")
    for n in range(8):
        alice.write(f"m{n}.md", memory(f"m{n}", f"fact {n}"))
    alice.sync()
    bob.sync()
    carol.sync()
    bob.remove("m1.md")
    carol.write("sub/new.md", memory("new", "carol's"))
    bob.sync()
    carol.sync()
    alice.sync()
    bob.sync()
    expected = {f"fact {n}" for n in range(8) if n != 1} | {"carol's"}
    for home in (alice, bob, carol):
        assert bodies(home.files()) == expected
    assert set(remote_files(url)) == set(alice.files())


def test_racing_pushes_lose_nothing(tmp_path: Path) -> None:
    url, people = homes(tmp_path, "alice", "bob", "carol")
    for home in people:
        for n in range(3):
            home.write(f"{home.name}-{n}.md", memory(f"{home.name}{n}", f"{home.name} {n}"))
    start = threading.Barrier(len(people))
    outcomes = {}

    def run(home: Home) -> None:
        start.wait()
        outcomes[home.name] = home.sync()

    threads = [threading.Thread(target=run, args=(h,)) for h in people]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(o.ok for o in outcomes.values()), {n: o.message for n, o in outcomes.items()}
    for home in people:
        home.sync()
    expected = {f"{h.name} {n}" for h in people for n in range(3)}
    for home in people:
        assert bodies(home.files()) == expected
    assert len(remote_files(url)) == 9
    assert sum(o.attempts for o in outcomes.values()) >= 3


def test_an_index_both_sides_extend_is_merged_by_lines(tmp_path: Path) -> None:
    _, (alice, bob) = homes(tmp_path, "alice", "bob")
    alice.write("MEMORY.md", "# Team\n\n- [A](a.md) — a\n")
    alice.sync()
    bob.sync()
    alice.write("MEMORY.md", "# Team\n\n- [A](a.md) — a\n- [B](b.md) — b\n")
    bob.write("MEMORY.md", "# Team\n\n- [A](a.md) — a\n- [C](c.md) — c\n")
    alice.sync()
    outcome = bob.sync()
    assert outcome.lines_merged == ["MEMORY.md"] and not outcome.conflicts
    alice.sync()
    merged = "# Team\n\n- [A](a.md) — a\n- [B](b.md) — b\n- [C](c.md) — c\n"
    assert alice.files() == bob.files() == {"MEMORY.md": merged}


def test_a_secret_or_private_span_is_held_back_and_never_pushed(tmp_path: Path) -> None:
    url, (alice, bob) = homes(tmp_path, "alice", "bob")
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    alice.write("ok.md", memory("ok", "fine"))
    alice.write("key.md", memory("key", f"the token is {token}"))
    alice.write("mine.md", memory("mine", "<private>my salary</private> and more"))
    outcome = alice.sync()
    assert set(outcome.held) == {"key.md", "mine.md"}
    assert "github_token" in outcome.held["key.md"]
    assert set(remote_files(url)) == {"ok.md"}
    everything = git("--git-dir", url, "cat-file", "--batch-all-objects", "--batch")
    assert token.encode() not in everything and b"salary" not in everything
    assert bob.sync().ok and set(bob.files()) == {"ok.md"}
    alice.write("key.md", memory("key", "the token lives in the vault"))
    assert "key.md" in alice.sync().pushed
    assert token.encode() not in git("--git-dir", url, "cat-file", "--batch-all-objects", "--batch")


def test_a_held_memory_the_remote_changed_is_kept_beside_it(tmp_path: Path) -> None:
    url, (alice, bob) = homes(tmp_path, "alice", "bob")
    alice.write("x.md", memory("x", "v1"))
    alice.sync()
    bob.sync()
    bob.write("x.md", memory("x", "v2 from bob"))
    bob.sync()
    alice.write("x.md", memory("x", "v1 and the password=hunter2hunter2"))
    alice.sync()
    files = alice.files()
    assert "v2 from bob" in files["x.md"]
    assert any("hunter2" in t for p, t in files.items() if p != "x.md")
    assert all(b"hunter2" not in data for data in remote_files(url).values())


def test_a_mass_removal_waits_for_the_users_word(tmp_path: Path) -> None:
    url, (alice, bob) = homes(tmp_path, "alice", "bob")
    for n in range(12):
        alice.write(f"m{n}.md", memory(f"m{n}", str(n)))
    alice.sync()
    bob.sync()
    for n in range(10):
        alice.remove(f"m{n}.md")
    stopped = alice.sync()
    assert "--allow-deletes" in stopped.message and len(remote_files(url)) == 12
    bob.sync()
    assert len(bob.files()) == 12
    assert alice.sync(allow_deletes=True).ok
    bob.sync()
    assert len(bob.files()) == 2


def test_a_ref_that_vanished_is_made_again_from_what_is_here(tmp_path: Path) -> None:
    url, (alice,) = homes(tmp_path, "alice")
    alice.write("a.md", memory("a", "kept"))
    alice.sync()
    git("--git-dir", url, "update-ref", "-d", "refs/memd/team")
    outcome = alice.sync()
    assert outcome.ok and "a.md" in outcome.pushed
    assert "a.md" in alice.files() and set(remote_files(url)) == {"a.md"}


def test_folder_mode_proposes_on_a_branch_and_reads_the_reviewed_folder(tmp_path: Path) -> None:
    url, (alice, bob) = homes(tmp_path, "alice", "bob")
    work = tmp_path / "work"
    git("clone", "--quiet", url, str(work))
    (work / "README").write_text("hi\n")
    git("add", "README", cwd=work)
    git("commit", "--quiet", "-m", "init", cwd=work)
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=work)
    target = Target(url, "refs/heads/main", "refs/heads/memd/team/alice", ".memd/team")
    alice.write("deploy.md", memory("deploy", "reviewed fact"))
    proposed = alice.sync(target=target)
    assert proposed.ok and proposed.pushed == ["deploy.md"], proposed.message
    assert remote_files(url, "refs/heads/main") == {"README": b"hi\n"}
    branch = remote_files(url, "refs/heads/memd/team/alice")
    assert set(branch) == {"README", ".memd/team/deploy.md"}
    assert alice.sync(target=target).pushed == []  # the same proposal is not pushed again
    git("fetch", "--quiet", "origin", "memd/team/alice", cwd=work)
    git("merge", "--quiet", "--ff-only", "FETCH_HEAD", cwd=work)  # the review merges it
    git("push", "--quiet", "origin", "HEAD:refs/heads/main", cwd=work)
    bob_target = Target(url, "refs/heads/main", "refs/heads/memd/team/bob", ".memd/team")
    assert bob.sync(target=bob_target).taken == ["deploy.md"]
    assert "reviewed fact" in bob.files()["deploy.md"]
