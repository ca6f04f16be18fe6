"""Persistent typed memories (memdir) and recall."""
