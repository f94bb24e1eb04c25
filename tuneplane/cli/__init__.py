"""The command line: one small module per command, wired together in `main`."""
