"""Periodic consolidation of memories."""
