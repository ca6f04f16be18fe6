"""``python -m memd.mcp``: the same as the ``memd-mcp`` command."""

from memd.mcp.front import main

if __name__ == "__main__":
    main()
