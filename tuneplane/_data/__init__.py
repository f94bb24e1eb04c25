"""Packaged data: schemas, the recipe catalog and templates (mapped from the repository root)."""
