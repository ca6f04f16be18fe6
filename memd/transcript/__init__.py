"""Reading Claude Code transcripts: parsing, tailing, rebuilding the active conversation."""
