"""Where coding agents write their sessions, one room per agent (R-T1 for every agent).

:mod:`memd.sources.base` is the protocol the house knows them by: the folder to watch, which
files are sessions, what a session and its project are, and a reader that turns the agent's
lines into the common conversation model (:mod:`memd.transcript.conversation`). The watcher,
the session registry, the queues and the services know agents only through it; a new agent
is a new room here (:func:`memd.sources.registry.sources_for`), not edits across the house.
"""
