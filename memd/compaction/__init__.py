"""Compaction of a full context window (SPEC §3).

Pure cores: ``threshold`` (when, circuit breaker), ``boundaries`` (cut points, API rounds),
``api_form`` (keeping output valid), ``session_memory`` (level 1), ``full`` + ``retry``
(levels 2 and 3), ``microcompact``, ``restore`` (planning). ``strategy`` runs the ladder.
"""
