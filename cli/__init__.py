"""The `robust-tune` command line: thin commands that parse, call pipeline/, and render with Rich."""
