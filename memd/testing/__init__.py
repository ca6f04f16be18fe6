"""Test support shipped with memd (used by tests/ and bench/)."""
