"""Restricted sub-agents: tools, permission policies, the read-only shell, the runner."""
