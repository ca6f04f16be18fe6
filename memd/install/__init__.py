"""Writing memd into other programs' configuration (``memdctl install-mcp``)."""
