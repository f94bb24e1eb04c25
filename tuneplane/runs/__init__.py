"""A run's life as a person drives it: prepare, submit, rerun, cancel, export/eval, local runs, and the
status transitions every run goes through."""
