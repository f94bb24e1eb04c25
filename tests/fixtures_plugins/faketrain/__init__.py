"""A stand-in training framework for the launcher tests."""
