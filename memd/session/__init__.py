"""Per-session working notes (session memory)."""
