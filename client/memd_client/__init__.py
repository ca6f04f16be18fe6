"""Thin client for the memd daemon. Imports only msgpack and the standard library."""
