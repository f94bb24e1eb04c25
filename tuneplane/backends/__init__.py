"""Backends run a rendered run somewhere: `local` (this machine) or `kubernetes`."""
