"""Memory that travels: a project's ``team/`` memories exchanged over its own git remote, and
one person's memories kept in a private remote of theirs (issue 37).

The pieces, bottom up:

* pure: :mod:`~memd.team.entries` (a remote tree read as hostile input: names, modes,
  sizes, counts), :mod:`~memd.team.steering` (text that tries to steer an agent),
  :mod:`~memd.team.gates` (what may leave, what may come in), :mod:`~memd.team.merge` (the
  per-file three-way merge), :mod:`~memd.team.lines` (an index merged by lines, conflict
  copies), :mod:`~memd.team.provenance` (who wrote a memory, with which agent);
* I/O: :mod:`~memd.team.store` (a private bare repository per project, the only place git
  runs for a sync: plumbing pinned, fetch and push with the user's own credentials),
  :mod:`~memd.team.local` (the memory files, through :mod:`memd.confined`),
  :mod:`~memd.team.record` (what the last sync agreed on);
* orchestration: :mod:`~memd.team.sync` (one sync, blocking), :mod:`~memd.team.history`,
  :mod:`~memd.team.share`, and :mod:`~memd.team.service` (the daemon's side: requests,
  automatic syncs under its task group, ``status``).

A sync pushes before it changes anything here and records what it agreed on last, so a kill
at any instant leaves either the old state or the new one, and the next sync converges on the
same result (conflict copies are named by their content, so a second run finds the first
run's copy instead of making another).
"""
