"""Pydantic models: the source of truth for every file a person or the bot writes.

`schemas/*.json` are generated from these (`python -m tuneplane.schemas`); a test fails on drift.
"""
