"""Maintainers' generators: the command reference and the JSON Schemas."""
