"""memd: a per-user daemon that gives coding agents working notes, compaction and memory."""

__version__ = "0.1.0"
