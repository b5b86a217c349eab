"""The `mailroom` command line (the top layer)."""
