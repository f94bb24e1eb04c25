"""Metric names: the one vocabulary every reader of a run's metrics shares (see `vocab`)."""

from tuneplane.metrics.vocab import Vocabulary, is_hardware

__all__ = ["Vocabulary", "is_hardware"]
