"""Job-side helpers shared with the developer side: digests and the PEP 440 matcher. Standard library only."""
