"""Pydantic models: the source of truth for every file a person or the bot writes.

`schemas/*.json` are generated from these (`python -m tuneplane.dev.schemagen`); a test fails on drift.
These modules do without `from __future__ import annotations`: pydantic would compile and evaluate
every annotation string when a model class is defined, a fifth of defining the models at start-up.
"""
