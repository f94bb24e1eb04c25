"""Packaged data (read through importlib.resources)."""
