"""Compaction of a full context window."""
