"""Finding and loading the lab: positioned YAML/JSON, the catalog, locks, run files, git."""
