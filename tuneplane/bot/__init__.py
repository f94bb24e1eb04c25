"""The CI bot: the idle check, then one pass that reconciles (submits, cancels) or syncs (observes) the
runs a commit asks for, acting on the commit's snapshot, never the work tree."""
